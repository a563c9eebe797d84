"""The imgpipe command line, run in-process as a user would call it."""

from __future__ import annotations

import json
import os
import socket
import subprocess
import sys
import tempfile
import threading
from http.server import BaseHTTPRequestHandler, HTTPServer

import pytest

from imgpipe.pipelines import cli
from imgpipe.pipelines.cli import errors
from tests import imagegen
from tests.outputs import tree

IN_PROCESS = ["--runner=DirectRunner", "--direct_num_workers=1"]


@pytest.mark.unit
def test_help_lists_the_subcommands(capsys):
    with pytest.raises(SystemExit) as exit_info:
        cli.main(["--help"])
    assert exit_info.value.code == 0
    out = capsys.readouterr().out
    for name in ("version", "convert", "stats", "run", "demo", "kfp"):
        assert f"    {name}" in out


@pytest.mark.unit
def test_version_prints_the_stack(capsys):
    assert cli.main(["version"]) == 0
    out = capsys.readouterr().out
    assert "tfx                          1.21.0" in out
    assert "tensorflow                   2.21.0" in out
    assert "apache-beam" in out and "kfp" in out


@pytest.mark.component
def test_convert_shows_progress_and_a_summary(tmp_path, capsys, monkeypatch):
    temp = tmp_path / "temp"  # where the progress bar's files go, and Beam's until exit
    temp.mkdir()
    monkeypatch.setattr(tempfile, "tempdir", str(temp))
    src = str(tmp_path / "src")
    imagegen.make_image_folder(src, {"a": 5, "b": 5})
    imagegen.write(os.path.join(src, "a", "broken.jpg"), b"")
    imagegen.write(os.path.join(src, "notes.txt"), b"x")
    with open(os.path.join(src, "a", "img_000.jpg"), "rb") as f:
        imagegen.write(os.path.join(src, "b", "copy.jpg"), f.read())
    os.makedirs(os.path.join(src, "c"))
    out = str(tmp_path / "out")

    code = cli.main(
        [
            "convert",
            src,
            out,
            "--resize",
            "16",
            "--center-crop",
            "--quality",
            "85",
            "--shards",
            "2",
            "--eval-fraction",
            "0.3",
            "--stratify",
            *IN_PROCESS,
        ]
    )

    assert code == 0
    captured = capsys.readouterr()
    assert "img/s" in captured.err  # the progress bar: count, rate and ETA
    assert "images written   9" in captured.out
    assert "skipped          3" in captured.out
    assert "ignored          1" in captured.out
    assert "files seen       13 = written + skipped + ignored" in captured.out
    assert "label conflicts  1   (2 byte-identical images under different labels, skipped" in (
        captured.out
    )
    assert "warning: class folder 'c' has no image\n" in captured.out
    assert (
        "warning: label conflict: identical bytes under labels [a, b]: a/img_000.jpg, "
        "b/copy.jpg (skipped)\n"
    ) in captured.out
    summary = json.load(open(os.path.join(out, "conversion_summary.json")))
    assert summary["image_options"]["resize"] == 16
    # Stratified 30% of the images written: 1 of the 4 "a" (the broken one and the
    # conflict are skipped), 1 of the 5 "b".
    assert summary["splits"]["eval"]["labels"] == {"a": 1, "b": 1}
    assert sorted(os.listdir(os.path.join(out, "Split-train"))) == [
        "data_tfrecord-00000-of-00002",
        "data_tfrecord-00001-of-00002",
    ]
    assert [name for name in os.listdir(temp) if name.startswith("imgpipe")] == []


@pytest.mark.component
def test_convert_keeps_foreign_files_and_replaces_a_finished_output_only_when_told(
    tmp_path, capsys
):
    src = str(tmp_path / "src")
    imagegen.make_image_folder(src, {"a": 3, "b": 3})
    out = tmp_path / "out"
    out.mkdir()
    (out / "notes.txt").write_text("mine")
    convert = ["convert", src, str(out), "--no-progress", *IN_PROCESS]

    assert cli.main(convert) == 1
    assert f"{out / 'notes.txt'} was not written by a conversion" in capsys.readouterr().err
    assert os.listdir(out) == ["notes.txt"]

    (out / "notes.txt").unlink()
    assert cli.main(convert) == 0
    first = tree(str(out))
    assert cli.main(convert) == 1
    assert "holds a finished conversion; pass --overwrite" in capsys.readouterr().err
    assert cli.main([*convert, "--overwrite"]) == 0
    assert tree(str(out)) == first


@pytest.mark.component
def test_convert_on_error_fail_is_one_line_that_names_the_file_and_the_fix(tmp_path, capsys):
    src = str(tmp_path / "src")
    imagegen.make_image_folder(src, {"a": 2})
    imagegen.write(os.path.join(src, "a", "zero.png"), b"")
    out = tmp_path / "out"
    code = cli.main(["convert", src, str(out), "--on-error", "fail", "--no-progress", *IN_PROCESS])
    assert code == 1
    # Beam logs the failed element with its traceback before raising it: not without --debug.
    assert capsys.readouterr().err.splitlines() == [
        "imgpipe: error: a/zero.png: empty file (0 bytes); fix or remove the file, "
        "or convert with --on-error skip to skip it with a report entry"
    ]
    assert not any(out.rglob("data_tfrecord-*"))


# ---- user errors: one line that names the fix, a traceback only with --debug ---------


def run_cli(argv: list[str], capsys) -> tuple[int, list[str]]:
    """The exit code and the lines on stderr of `imgpipe ARGV`, run in this process."""
    code = cli.main(argv)
    return code, capsys.readouterr().err.splitlines()


@pytest.fixture
def workdir(tmp_path, monkeypatch):
    """A folder of images `src`, a file `afile`, and YAML files, as the current directory."""
    monkeypatch.chdir(tmp_path)
    imagegen.make_image_folder("src", {"a": 2})
    (tmp_path / "afile").write_text("x")
    (tmp_path / "broken.yaml").write_text("pipeline_name: x\ntrainer: {epochs: [1\n")
    (tmp_path / "bad-value.yaml").write_text("trainer: {epochs: -1}\n")
    return tmp_path


USER_ERRORS = {
    "a typo in a convert flag": (
        ["convert", "src", "out", "--quailty", "50"],
        2,
        "imgpipe: error: unrecognized arguments: --quailty 50 (did you mean --quality?); "
        "see 'imgpipe convert --help'. Apache Beam options it does not know go after '--'",
    ),
    "a stray word": (
        ["convert", "src", "out", "stray"],
        2,
        "imgpipe: error: unrecognized arguments: stray; see 'imgpipe convert --help'. "
        "Apache Beam options it does not know go after '--'",
    ),
    "Beam options to a command that runs no Beam pipeline": (
        ["version", "--", "--runner=DirectRunner"],
        2,
        "imgpipe: error: unrecognized arguments: --runner=DirectRunner; "
        "see 'imgpipe version --help'",
    ),
    "a Beam option with a bad value": (
        ["convert", "src", "out", "--direct_num_workers", "many"],
        1,
        "imgpipe: error: Apache Beam option argument --direct_num_workers: "
        "invalid int value: 'many'",
    ),
    "a bad choice": (
        ["convert", "src", "out", "--on-error", "maybe"],
        2,
        "imgpipe: error: argument --on-error: invalid choice: 'maybe' (choose from skip, fail); "
        "see 'imgpipe convert --help'",
    ),
    "a data folder that does not exist (convert)": (
        ["convert", "nowhere", "out"],
        1,
        "imgpipe: error: nowhere: no such folder; give the image folder "
        "(root/<label>/... or root/<split>/<label>/...)",
    ),
    "a data folder that does not exist (run local)": (
        ["run", "local", "--data", "nowhere"],
        1,
        "imgpipe: error: --data nowhere: no such folder; give the image folder "
        "(root/<label>/... or root/<split>/<label>/...)",
    ),
    "an Examples folder that does not exist": (
        ["stats", "nowhere"],
        1,
        "imgpipe: error: nowhere: no such folder; give the output folder of "
        "`imgpipe convert` or an Examples artifact's folder",
    ),
    "an output path that is a file": (
        ["convert", "src", "afile"],
        1,
        "imgpipe: error: afile is a file; give a new or empty folder as the output",
    ),
    "an output path below a file": (
        ["convert", "src", "afile/out"],
        1,
        "imgpipe: error: afile is a file, so afile/out cannot be made; "
        "give a new or empty folder as the output",
    ),
    "invalid YAML": (
        ["kfp", "compile", "--config", "broken.yaml"],
        1,
        "imgpipe: error: broken.yaml: not valid YAML: line 3, column 1: "
        "expected ',' or ']', but got '<stream end>'",
    ),
    "a bad config value": (
        ["run", "local", "--data", "src", "--config", "bad-value.yaml"],
        1,
        "imgpipe: error: bad-value.yaml: trainer.epochs must be at least 1, got -1",
    ),
    "a missing package": (
        ["kfp", "submit", "--host", "http://kfp", "--experiment", "e", "--package", "none.yaml"],
        1,
        "imgpipe: error: --package none.yaml: no such file; give a package that "
        "`imgpipe kfp compile` wrote, or leave --package out to compile --config now",
    ),
    "a package that is not YAML": (
        ["kfp", "submit", "--host", "http://kfp", "--experiment", "e", "--package", "broken.yaml"],
        1,
        "imgpipe: error: --package broken.yaml: not valid YAML: line 3, column 1: "
        "expected ',' or ']', but got '<stream end>'",
    ),
    "a package that is not a pipeline": (
        ["kfp", "submit", "--host", "http://kfp", "--experiment", "e", "--package", "afile"],
        1,
        "imgpipe: error: --package afile: not a compiled KFP pipeline (no pipelineInfo); "
        "give a package that `imgpipe kfp compile` wrote",
    ),
}


@pytest.mark.unit
@pytest.mark.parametrize("argv, code, line", USER_ERRORS.values(), ids=USER_ERRORS)
def test_a_user_error_is_one_line_that_names_the_fix(workdir, capsys, argv, code, line):
    assert run_cli(argv, capsys) == (code, [line])
    assert not (workdir / "out").exists()


@pytest.mark.unit
def test_debug_shows_the_traceback_instead(workdir, capsys):
    with pytest.raises(errors.UserError, match="nowhere: no such folder"):
        cli.main(["convert", "nowhere", "out", "--debug"])
    with pytest.raises(errors.UserError, match="nowhere: no such folder"):
        cli.main(["--debug", "run", "local", "--data", "nowhere"])


@pytest.mark.unit
def test_a_bug_is_one_line_that_says_so():
    try:
        {}["missing"]
    except KeyError as bug:
        line = errors.one_line(bug)
    assert line == (
        "imgpipe: internal error: KeyError: 'missing' "
        "(a bug: rerun with --debug for the traceback, and report it)"
    )
    # A user error wrapped by a library is found in the chain of causes.
    try:
        try:
            raise FileNotFoundError(2, "No such file or directory", "/data/x.jpg")
        except OSError as e:
            raise RuntimeError("component failed") from e
    except RuntimeError as wrapped:
        assert errors.one_line(wrapped) == "imgpipe: error: /data/x.jpg: No such file or directory"


@pytest.mark.unit
def test_a_job_the_runner_failed_is_one_line_that_says_nothing_was_published():
    # As Beam's PortableRunner raises it for a job that Flink failed (a lost TaskManager).
    failed = RuntimeError(
        "Pipeline BeamApp-x_1 failed in state FAILED: java.util.concurrent.TimeoutException: "
        "Heartbeat of TaskManager with id taskmanager-2 timed out.\n\tat org.apache.flink.X"
    )
    assert errors.one_line(failed) == (
        "imgpipe: error: the Beam job failed on the runner (FAILED): "
        "java.util.concurrent.TimeoutException: Heartbeat of TaskManager with id "
        "taskmanager-2 timed out. Nothing was published; rerun it once the cluster is whole "
        "(its logs say more)"
    )
    assert errors.exit_code(failed) == 1
    # Any other RuntimeError is still a bug.
    assert errors.one_line(RuntimeError("boom")).startswith("imgpipe: internal error: ")


@pytest.fixture
def golden_package() -> str:
    return os.path.join(os.path.dirname(__file__), "golden", "pipeline.yaml")


@pytest.mark.unit
def test_an_unreachable_kfp_host_names_the_url_and_what_was_tried(golden_package, capsys):
    with socket.socket() as s:  # a port that nothing listens on
        s.bind(("127.0.0.1", 0))
        host = f"http://127.0.0.1:{s.getsockname()[1]}"
    argv = ["kfp", "submit", "--host", host, "--experiment", "e", "--package", golden_package]
    assert run_cli(argv, capsys) == (
        1,
        [
            f"imgpipe: error: cannot reach the KFP API at {host}: GET {host}/apis/v2beta1/healthz "
            "failed ([Errno 111] Connection refused); give --host the KFP API endpoint, e.g. "
            "http://localhost:8080 after 'kubectl -n kubeflow port-forward svc/ml-pipeline-ui "
            "8080:80'"
        ],
    )


class NotKfp(BaseHTTPRequestHandler):
    """A web server that is not the KFP API: every path is a 404 page."""

    def do_GET(self):  # noqa: N802
        self.send_response(404)
        self.send_header("Content-Type", "text/html")
        self.end_headers()
        self.wfile.write(b"<html>not here</html>")

    def log_message(self, *args):
        pass


@pytest.mark.unit
def test_a_host_that_is_not_kfp_names_the_url_and_its_answer(golden_package, capsys):
    server = HTTPServer(("127.0.0.1", 0), NotKfp)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    host = f"http://127.0.0.1:{server.server_port}"
    argv = ["kfp", "schedule", "--host", host, "--experiment", "e", "--cron", "0 0 3 * * *"]
    try:
        code, lines = run_cli([*argv, "--package", golden_package], capsys)
    finally:
        server.shutdown()
    assert (code, lines) == (
        1,
        [
            f"imgpipe: error: --host {host} is not the KFP API: GET {host}/apis/v2beta1/healthz "
            "answered HTTP 404 Not Found; give --host the KFP API endpoint, e.g. "
            "http://localhost:8080 after 'kubectl -n kubeflow port-forward svc/ml-pipeline-ui "
            "8080:80'"
        ],
    )


@pytest.mark.unit
def test_a_real_process_prints_one_line_and_nothing_else(tmp_path):
    """The console script as a user runs it: no warnings or logs around the line."""
    result = subprocess.run(
        [sys.executable, "-m", "imgpipe.pipelines.cli", "convert", "src", "out", "--quailty", "5"],
        cwd=tmp_path,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert (result.returncode, result.stdout) == (2, "")
    assert result.stderr.splitlines() == [
        "imgpipe: error: unrecognized arguments: --quailty 5 (did you mean --quality?); "
        "see 'imgpipe convert --help'. Apache Beam options it does not know go after '--'"
    ]


@pytest.mark.component
def test_convert_takes_beam_options_after_the_separator(tmp_path, capsys):
    src = str(tmp_path / "src")
    imagegen.make_image_folder(src, {"a": 2})
    out = tmp_path / "out"
    argv = ["convert", src, str(out), "--no-progress", "--shards", "1", "--"]
    assert cli.main([*argv, *IN_PROCESS]) == 0
    assert "images written   2" in capsys.readouterr().out
