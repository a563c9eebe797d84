"""The imgpipe command line, run in-process as a user would call it."""

from __future__ import annotations

import contextlib
import json
import os
import shutil
import socket
import subprocess
import sys
import tempfile
import threading
from http.server import BaseHTTPRequestHandler, HTTPServer

import pytest
import yaml

from imgpipe.pipelines import cli
from imgpipe.pipelines.cli import chatter, errors, temporary
from tests import imagegen, waiting
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
def test_convert_shows_a_summary(tmp_path, capsys, monkeypatch):
    temp = tmp_path / "temp"  # where Beam's files go until exit
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
    # stderr is not a terminal here: no progress bar (tests/test_progress.py shows one).
    assert "%|" not in captured.err
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
    # Only the command's own folder waits for the process to exit (cli/temporary.py), and
    # it holds nothing of imgpipe's.
    (run_folder,) = os.listdir(temp)
    assert run_folder.startswith(temporary.PREFIX)
    assert [n for n in os.listdir(temp / run_folder) if n.startswith("imgpipe")] == []


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
    "a file given as the data folder (run local)": (
        ["run", "local", "--data", "afile"],
        1,
        "imgpipe: error: --data afile is a file, not a folder; give the image folder "
        "(root/<label>/... or root/<split>/<label>/...)",
    ),
    "a file given as the data folder (convert)": (
        ["convert", "afile", "out"],
        1,
        "imgpipe: error: afile is a file, not a folder; give the image folder "
        "(root/<label>/... or root/<split>/<label>/...)",
    ),
    "a file given as the Examples folder (stats)": (
        ["stats", "afile"],
        1,
        "imgpipe: error: afile is a file, not a folder; give the output folder of "
        "`imgpipe convert` or an Examples artifact's folder",
    ),
    "a setting given as a flag (run local)": (
        ["run", "local", "--data", "src", "--epochs", "3"],
        2,
        "imgpipe: error: unrecognized arguments: --epochs 3 (did you mean --set "
        "trainer.epochs=3?); see 'imgpipe run local --help'",
    ),
    "a setting of two sections given as a flag (kfp compile)": (
        ["kfp", "compile", "--seed=7"],
        2,
        "imgpipe: error: unrecognized arguments: --seed=7 (did you mean --set "
        "example_gen.output.seed=7 or --set trainer.seed=7?); see 'imgpipe kfp compile --help'",
    ),
    "a span pattern whose parent does not exist (run local)": (
        ["run", "local", "--data", "nowhere/span-{SPAN}"],
        1,
        "imgpipe: error: --data nowhere/span-{SPAN}: nowhere, the folder that holds the "
        "spans, does not exist; create it and put each span in it (span-1, ...)",
    ),
    "a span pattern that matches no folder (run local)": (
        ["run", "local", "--data", "src/span-{SPAN}"],
        1,
        "imgpipe: error: --data src/span-{SPAN}: no folder in src matches span-{SPAN} (it "
        "holds a); put each span in a folder of src named as the pattern says (span-1, ...)",
    ),
    "no data at all (run local)": (
        ["run", "local"],
        1,
        "imgpipe: error: no image folder: give --data DIR, or set data_root in the config "
        "(--config FILE)",
    ),
    "a dataset of one class (run local)": (
        ["run", "local", "--data", "src"],
        1,
        "imgpipe: error: --data src: the dataset has 1 class with images ('a'), and a "
        "classifier needs at least 2: add a folder <label>/ of images for each other class",
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
        timeout=waiting.COMMAND_S,
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


@pytest.mark.component
def test_a_run_prints_its_summary_without_the_libraries_chatter_unless_verbose(tmp_path):
    """TensorFlow's C++ notes (oneDNN, CUDA, absl's banner) are dropped on their way to
    stderr, from this process and its Beam workers; --verbose shows them."""
    src = str(tmp_path / "src")
    imagegen.make_image_folder(src, {"a": 3, "b": 3})
    stderr = {}
    temporary = tmp_path / "tmp"
    temporary.mkdir()
    for flags in ([], ["--verbose"]):
        result = subprocess.run(
            [
                sys.executable,
                "-m",
                "imgpipe.pipelines.cli",
                *flags,
                "convert",
                src,
                str(tmp_path / f"out{len(flags)}"),
                "--no-progress",
            ],
            capture_output=True,
            text=True,
            timeout=waiting.JOB_S,
            env={**os.environ, "TMPDIR": str(temporary)},
        )
        assert result.returncode == 0, result.stderr
        assert "images written   6" in result.stdout
        assert os.listdir(temporary) == []
        stderr[bool(flags)] = result.stderr.splitlines()
    chatty = [line for line in stderr[True] if chatter.is_chatter(line.encode())]
    assert chatty, "nothing to filter: the test shows nothing"
    assert not [line for line in stderr[False] if chatter.is_chatter(line.encode())]
    assert not [line for line in stderr[False] if not line.startswith("warning: ")]


@pytest.mark.unit
def test_a_commands_temporary_folder_goes_at_exit_after_the_libraries_exit_handlers(tmp_path):
    """What a library leaves in the temporary folder goes with the command's folder when
    the process exits, after the library's own exit handler (Beam's job server removes
    its folder at exit) found it still there."""
    temporary, marker = tmp_path / "tmp", tmp_path / "handler-saw"
    temporary.mkdir()
    library = f"""
import atexit, os, tempfile
from imgpipe.pipelines.cli import process_exit, temporary
with temporary.command_folder() as folder:
    assert tempfile.gettempdir() == folder == os.environ["TMPDIR"]
    left = tempfile.mkdtemp(prefix="beam-temp")
    tempfile.mkstemp(dir=left)
    atexit.register(lambda: open({str(marker)!r}, "w").write(str(os.path.isdir(left))))
assert tempfile.gettempdir() == os.environ["TMPDIR"] == {str(temporary)!r}
process_exit.end_process(0)  # as the imgpipe command ends
"""
    result = subprocess.run(
        [sys.executable, "-c", library],
        capture_output=True,
        text=True,
        timeout=waiting.COMMAND_S,
        env={**os.environ, "TMPDIR": str(temporary)},
    )
    assert result.returncode == 0, result.stderr
    assert marker.read_text() == "True"
    assert os.listdir(temporary) == []


@pytest.mark.unit
def test_the_folder_of_a_command_killed_by_sigkill_goes_as_the_next_command_starts(tmp_path):
    """A SIGKILL runs no exit handler: the next command removes the folder of every
    command that is gone (its lock is free), and leaves a running command's alone, and
    one without a lock file."""
    import signal

    temporary_root = tmp_path / "tmp"
    temporary_root.mkdir()
    env = {**os.environ, "TMPDIR": str(temporary_root)}
    command = """
import os, signal, sys
from imgpipe.pipelines.cli import process_exit, temporary
with temporary.command_folder() as folder:
    open(os.path.join(folder, "work"), "w").close()
    print(folder, flush=True)
    if sys.argv[1] == "killed":
        os.kill(os.getpid(), signal.SIGKILL)
    if sys.argv[1] == "running":
        sys.stdin.read()
process_exit.end_process(0)
"""

    def start(how: str) -> tuple[subprocess.Popen, str]:
        process = subprocess.Popen(
            [sys.executable, "-c", command, how],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            text=True,
            env=env,
        )
        assert process.stdout is not None
        return process, process.stdout.readline().strip()

    running, running_folder = start("running")
    killed, killed_folder = start("killed")
    assert killed.wait(timeout=waiting.COMMAND_S) == -signal.SIGKILL
    unlocked = temporary_root / f"{temporary.PREFIX}without-a-lock"  # an older version's
    unlocked.mkdir()
    assert os.path.exists(os.path.join(killed_folder, "work"))

    finished, finished_folder = start("finished")
    assert finished.wait(timeout=waiting.COMMAND_S) == 0
    assert sorted(os.listdir(temporary_root)) == sorted(
        [os.path.basename(running_folder), unlocked.name]
    )
    assert running.communicate("", timeout=waiting.COMMAND_S)[0] == ""
    assert running.returncode == 0
    assert not os.path.exists(running_folder)


@pytest.mark.unit
def test_a_command_ends_as_python_exits_but_without_the_interpreters_teardown():
    """end_process, which ends every imgpipe command: threads joined, exit handlers run
    last-registered first, buffered output flushed, the command's code; and none of the
    teardown that frees objects one by one (1.3 s after TensorFlow was imported)."""
    script = """
import atexit, sys, threading, time
from imgpipe.pipelines.cli import process_exit

class Freed:
    def __del__(self):
        print("freed one by one")

kept = Freed()
written = threading.Event()

def late():
    written.wait()  # after the main thread's write, however slow the machine
    time.sleep(0.2)  # most likely still running as end_process starts: its join waits
    print("thread finished")

threading.Thread(target=late).start()
atexit.register(print, "registered first, runs last")
atexit.register(print, "registered last, runs first")
sys.stdout.write("buffered; ")
written.set()
process_exit.end_process(7)
"""
    result = subprocess.run(
        [sys.executable, "-c", script], capture_output=True, text=True, timeout=waiting.COMMAND_S
    )
    assert (result.returncode, result.stderr) == (7, "")
    assert result.stdout.splitlines() == [
        "buffered; thread finished",
        "registered last, runs first",
        "registered first, runs last",
    ]
    # The same script left to Python's own exit frees the object: the check can fail.
    ordinary = script.replace("process_exit.end_process(7)", "sys.exit(7)")
    result = subprocess.run(
        [sys.executable, "-c", ordinary], capture_output=True, text=True, timeout=waiting.COMMAND_S
    )
    assert result.returncode == 7 and result.stdout.splitlines()[-1] == "freed one by one"


@pytest.mark.unit
def test_the_command_keeps_pythons_exit_codes(tmp_path):
    for argv, code in ((["--help"], 0), (["no-such-command"], 2), (["version"], 0)):
        result = subprocess.run(
            [sys.executable, "-m", "imgpipe.pipelines.cli", *argv],
            cwd=tmp_path,
            capture_output=True,
            text=True,
            timeout=waiting.COMMAND_S,
        )
        assert result.returncode == code, (argv, result.stderr)
        assert result.stdout if code == 0 else result.stderr.startswith("imgpipe: error: ")


@pytest.mark.unit
def test_chatter_is_told_from_what_the_user_reads():
    assert chatter.is_chatter(
        b"I0000 00:00:1795635749.416393   29778 port.cc:153] oneDNN custom operations are on."
    )
    assert chatter.is_chatter(
        b"E0000 00:00:1795635749.4 29778 cuda_executor.cc:1228] failed call to cuInit: x"
    )
    assert chatter.is_chatter(
        b"WARNING: All log messages before absl::InitializeLog() is called are written to STDERR"
    )
    assert not chatter.is_chatter(b"F0000 00:00:17.1 29778 a.cc:1] Check failed: x")
    assert not chatter.is_chatter(b"imgpipe: error: /x: no such folder")
    assert not chatter.is_chatter(b"warning: class 'a' lost every file")


@pytest.mark.unit
@pytest.mark.parametrize(
    "argv",
    [
        ["convert", "no-such-folder", "out"],
        ["stats", "no-such-folder"],
        ["stats", ".", "--baseline", "no-such-file"],
        ["run", "local", "--data", "no-such-folder"],
        ["run", "local", "--data", "no-such-folder", "--config", "no-such-file"],
    ],
)
def test_a_path_error_comes_before_tensorflow_and_beam_load(tmp_path, argv):
    code = (
        "import sys\n"
        "from imgpipe.pipelines import cli\n"
        f"code = cli.main({argv!r})\n"
        "heavy = sorted({'tensorflow', 'apache_beam'} & set(sys.modules))\n"
        "print(code, heavy)\n"
    )
    result = subprocess.run(
        [sys.executable, "-c", code],
        cwd=tmp_path,
        capture_output=True,
        text=True,
        timeout=waiting.COMMAND_S,
    )
    assert result.stdout.split("\n")[0] == "1 []", result.stderr
    assert "no such" in result.stderr or "does not exist" in result.stderr


@pytest.mark.unit
def test_default_work_folders_are_the_users_own():
    from imgpipe.pipelines import config as cfg

    assert os.path.basename(cfg.DEFAULT_WORK_DIR).startswith("imgpipe-")
    assert os.path.basename(cfg.DEFAULT_WORK_DIR) != "imgpipe-"
    config = cfg.PipelineConfig()
    for folder in (config.pipeline_root, config.serving_dir):
        assert folder.startswith(cfg.DEFAULT_WORK_DIR + os.sep)


@pytest.mark.unit
def test_every_statistics_setting_is_a_stats_flag_with_its_docstring():
    """A new StatisticsConfig field is a flag with no other edit: named after it (or as an
    earlier release named it), typed, with its default and its docstring's first sentence."""
    import argparse
    import dataclasses

    from imgpipe.components.image_statistics.config import StatisticsConfig
    from imgpipe.pipelines.cli import dataclass_flags, stats

    parser = argparse.ArgumentParser()
    stats.register(parser.add_subparsers())
    (command,) = parser._subparsers._group_actions[0].choices.values()
    flags = command.get_default("statistics_flags")
    assert {flag.field for flag in flags} == {f.name for f in dataclasses.fields(StatisticsConfig)}
    docs = dataclass_flags.field_docs(StatisticsConfig)
    text = command.format_help()
    for flag in flags:
        assert flag.option in text
        assert flag.option == "--" + stats.FLAG_NAMES.get(flag.field, flag.field).replace("_", "-")
        assert dataclass_flags.first_sentence(docs[flag.field])[:30] in " ".join(text.split())
    args = command.parse_args([".", "--leakage-threshold", "0.2", "--no-verify-images"])
    values = dataclass_flags.values(args, flags)
    assert values["leakage_threshold"] == 0.2 and values["verify_images"] is False
    assert values["drift_std_ratio"] == StatisticsConfig().drift_std_ratio


@pytest.mark.unit
def test_every_conversion_option_is_a_convert_flag_with_its_docstring_and_choices():
    """A new ImageOptions or OutputOptions field is a flag with no other edit, in its
    class's group, with its choices, its default and its docstring's first sentence."""
    import argparse
    import dataclasses

    from imgpipe.components.common.runtime import config_loader
    from imgpipe.components.image_example_gen.options import ImageOptions, OutputOptions
    from imgpipe.pipelines.cli import convert as convert_cli
    from imgpipe.pipelines.cli import dataclass_flags

    parser = argparse.ArgumentParser()
    convert_cli.register(parser.add_subparsers())
    (command,) = parser._subparsers._group_actions[0].choices.values()
    text = " ".join(command.format_help().split())
    by_hand = {"channels": "--rgb", "splits": "--eval-fraction"}
    for cls, key in ((ImageOptions, "image_flags"), (OutputOptions, "output_flags")):
        flags = {flag.field: flag for flag in command.get_default(key)}
        docs = dataclass_flags.field_docs(cls)
        for field in dataclasses.fields(cls):
            if field.name in by_hand:
                assert by_hand[field.name] in text
                continue
            flag = flags[field.name]
            spec = config_loader.flag_spec(field)
            assert flag.option == "--" + (spec.name or field.name).replace("_", "-")
            assert flag.option in text
            assert dataclass_flags.first_sentence(docs[field.name])[:30] in text
            if spec.choices:
                assert "{" + ",".join(spec.choices) + "}" in text
    args = command.parse_args(["s", "o", "--background", "0,0,0", "--shards", "3", "--rgb"])
    image, output = convert_cli.options_from_args(args)
    assert (image.background, image.channels, output.num_shards) == ((0, 0, 0), 3, 3)
    assert (image.verify, output.dali_index) == (ImageOptions().verify, True)
    with pytest.raises(SystemExit):  # one of the two, at most
        command.parse_args(["s", "o", "--shards", "3", "--shard-mb", "8"])


@pytest.mark.component
def test_convert_warns_of_a_class_that_lost_every_file_and_of_one_class(tmp_path, capsys):
    """A folder name with a leading space loses all its files; the one class left
    converts, with a warning line for each, and exit 0."""
    imagegen.make_image_folder(str(tmp_path / "src"), {"dog": 3, " cat": 3})
    out = str(tmp_path / "out")
    assert cli.main(["convert", str(tmp_path / "src"), out, "--no-progress"]) == 0
    warnings = [line for line in capsys.readouterr().out.splitlines() if "warning:" in line]
    assert warnings == [
        "warning: class folder ' cat' lost every file: it has white space at an end, which "
        "labels.txt cannot keep; rename the folder",
        "warning: the dataset has 1 class with images ('dog'), and a classifier needs at "
        "least 2: add a folder <label>/ of images for each other class",
    ]


@pytest.mark.component
def test_local_beam_runs_never_try_to_download_a_runner(caplog, make_pipeline):
    """Beam's DirectRunner tries Prism first, downloading it from GitHub; the local runs'
    default arguments name the in-process runner instead, so nothing is fetched."""
    import logging

    import apache_beam as beam

    caplog.set_level(logging.INFO)
    with make_pipeline() as p:
        _ = p | beam.Create([1, 2, 3]) | beam.CombineGlobally(sum)
    said = " ".join(record.getMessage() for record in caplog.records)
    assert "rism" not in said and "Downloading" not in said


# ---- what a new user trips on ---------------------------------------------------------


@pytest.mark.unit
def test_a_misspelt_set_key_names_the_closest_keys(workdir, capsys):
    code, lines = run_cli(["run", "local", "--data", "src", "--set", "trainer.epoch=3"], capsys)
    assert code == 1 and len(lines) == 1
    assert lines[0].startswith(
        "imgpipe: error: config: unknown key(s) ['epoch'] in trainer (did you mean 'epochs' or "
        "'frozen_epochs'?); allowed: ['backbone', "
    )


def _as_another_user(tmp: str) -> dict:
    """subprocess.run's arguments that run a command as a user who owns nothing in `tmp`:
    nobody when this is root (for whom permissions are no bar), else this user."""
    if os.geteuid() != 0:
        return {}
    for root, dirs, files in os.walk(tmp):
        for name in dirs:
            path = os.path.join(root, name)
            os.chmod(path, os.stat(path).st_mode | 0o055)
        for name in files:
            os.chmod(os.path.join(root, name), 0o644)
    os.chmod(tmp, 0o755)
    return {"user": 65534, "group": 65534}


CHECKOUT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


@contextlib.contextmanager
def _traversable(path: str):
    """While the block runs, every folder above and at `path` lets others list it and pass
    through (o+rx: Python's import finder lists each folder on the path); each mode is
    restored after."""
    changed = []
    folder = path
    while True:
        mode = os.stat(folder).st_mode
        if mode & 0o005 != 0o005:
            os.chmod(folder, (mode & 0o7777) | 0o005)
            changed.append((folder, mode & 0o7777))
        parent = os.path.dirname(folder)
        if parent == folder:
            break
        folder = parent
    try:
        yield
    finally:
        for folder, mode in changed:
            os.chmod(folder, mode)


HEAVY_PROBE = (
    "import sys\n"
    "from imgpipe.pipelines import cli\n"
    "code = cli.main(sys.argv[1:])\n"
    "print(code, sorted({'tensorflow', 'apache_beam', 'tfx'} & set(sys.modules)))\n"
)


@pytest.mark.unit
def test_an_unwritable_pipeline_root_names_the_folder_and_the_fix_before_anything_loads():
    # Not under pytest's tmp_path, which only root may enter.
    base = tempfile.mkdtemp(prefix="imgpipe-cli-")
    try:
        imagegen.make_image_folder(os.path.join(base, "src"), {"a": 1, "b": 1})
        locked = os.path.join(base, "locked")
        os.mkdir(locked)
        user = _as_another_user(base)
        os.chmod(locked, 0o555)
        # The other user imports the package from this checkout, which may sit in a
        # folder only its owner can enter (a clone into `mktemp -d`, as CI's may be).
        traverse = _traversable(CHECKOUT) if user else contextlib.nullcontext()
        root = os.path.join(locked, "root")
        src = os.path.join(base, "src")
        with traverse:
            result = subprocess.run(
                [
                    sys.executable,
                    "-c",
                    HEAVY_PROBE,
                    "run",
                    "local",
                    "--data",
                    src,
                    "--pipeline-root",
                    root,
                ],
                cwd=base,
                capture_output=True,
                text=True,
                timeout=waiting.COMMAND_S,
                **user,
            )
    finally:
        os.chmod(os.path.join(base, "locked"), 0o755)
        shutil.rmtree(base)
    assert result.stdout == "1 []\n", result.stderr
    assert result.stderr.splitlines() == [
        f"imgpipe: error: --pipeline-root {root}: this user cannot write in {locked} "
        "(Permission denied); give --pipeline-root a folder this user can write in (or set "
        "pipeline_root in the config)"
    ]


@pytest.mark.unit
def test_a_pipeline_root_below_a_file_names_the_file(workdir, capsys):
    code, lines = run_cli(["run", "local", "--data", "src", "--pipeline-root", "afile/r"], capsys)
    assert (code, lines) == (
        1,
        [
            f"imgpipe: error: --pipeline-root afile/r: {workdir / 'afile'} is a file; give "
            "--pipeline-root a folder this user can write in (or set pipeline_root in the config)"
        ],
    )


@pytest.mark.unit
@pytest.mark.parametrize(
    "argv, line",
    [
        (
            ["run", "local", "--data", "d" * 20_000],
            "imgpipe: error: argument 4 '" + "d" * 60 + "'... (20,000 characters) is longer "
            "than the 16,384 characters a free-text setting may have; give a shorter one",
        ),
        (
            ["convert", "s" * 5_000, "out"],
            "imgpipe: error: SRC '" + "s" * 60 + "'... (5,000 characters) is longer than the "
            "4,096 characters a path or URI may have; give a shorter one",
        ),
        (
            ["run", "local", "--data", "src", "--set", "pipeline_name=" + "p" * 10_000],
            "imgpipe: error: config: pipeline_name '" + "p" * 60 + "'... (10,000 characters) "
            "is longer than the 63 characters a name may have; give a shorter one",
        ),
        (
            ["run", "local", "--data", "src", "--set", "pipeline_name=" + "p" * 64],
            "imgpipe: error: config: pipeline_name '" + "p" * 60 + "'... (64 characters) is "
            "longer than the 63 characters a name may have; give a shorter one",
        ),
        (
            ["convert", "src", "out", "--" + "x" * 10_000],
            "imgpipe: error: unrecognized arguments: --" + "x" * 58 + "... (10,002 characters); "
            "see 'imgpipe convert --help'. Apache Beam options it does not know go after '--'",
        ),
    ],
    ids=["any argument", "a path", "a --set value", "a name", "an unknown flag"],
)
def test_a_long_argument_is_refused_in_one_short_line(workdir, capsys, argv, line):
    code, lines = run_cli(argv, capsys)
    assert code in (1, 2) and lines == [line]


@pytest.mark.unit
def test_a_long_value_a_library_echoes_is_cut_short_in_the_line():
    long_path = "/data/" + "x" * 10_000_000
    line = errors.one_line(FileNotFoundError(2, "No such file or directory", long_path))
    assert line == (
        "imgpipe: error: /data/" + "x" * 194 + "... (10,000,006 characters): "
        "No such file or directory"
    )


# ---- no credential in an option ---------------------------------------------------------

SECRET_VALUE = "Hunter2Pw"


@pytest.mark.unit
@pytest.mark.parametrize(
    "beam_args, named",
    [
        (["--s3_endpoint_url=https://AKIAX:Hunter2Pw@minio:9000"], "--s3_endpoint_url"),
        (
            ["--runner=FlinkRunner", "--flink_master=http://u:Hunter2Pw@flink:8081"],
            "--flink_master",
        ),
        (["--dataflow_service_options=token=Hunter2Pw"], "--dataflow_service_options"),
    ],
    ids=["s3_endpoint_url", "flink_master", "dataflow_service_options"],
)
def test_a_credential_in_a_beam_option_never_reaches_a_compiled_package(
    tmp_path, capsys, beam_args, named
):
    """The observed cases: each reached the compiled package three times."""
    config = tmp_path / "config.yaml"
    config.write_text(yaml.safe_dump({"data_root": "/data", "beam_args": beam_args}))
    output = tmp_path / "pipeline.yaml"
    setting = f"beam_args={json.dumps(beam_args)}"
    for argv, where in (
        (["kfp", "compile", "--config", str(config), "-o", str(output)], f"beam_args {named}"),
        # On the command line, the option names it before the config is loaded.
        (["kfp", "compile", "-o", str(output), "--set", setting], "--set beam_args"),
    ):
        code, lines = run_cli(argv, capsys)
        assert code == 1 and len(lines) == 1, lines
        assert lines[0].startswith(f"imgpipe: error: {where} (a "), lines[0]
        assert "Kubernetes Secret imgpipe-object-store" in lines[0]
        assert SECRET_VALUE not in lines[0]
        assert not output.exists()


@pytest.mark.unit
@pytest.mark.parametrize(
    "argv, named",
    [
        (
            ["convert", "src", "out", "--", "--flink_master=http://u:Hunter2Pw@flink:8081"],
            "--flink_master (a user name or password in its URL)",
        ),
        (
            ["convert", "src", "out", "--s3_secret_access_key", "Hunter2Pw"],
            "--s3_secret_access_key",
        ),
        (
            ["stats", "src", "--", "--experiments=AKIAIOSFODNN7EXAMPLE"],
            "--experiments (an AWS access key id)",
        ),
        (
            ["run", "local", "--data", "s3://AKIAX:Hunter2Pw@bucket/photos"],
            "--data (a user name or password in its URL)",
        ),
        (
            [
                "run",
                "local",
                "--data",
                "src",
                "--set",
                "trainer.weights=https://m/w.h5?token=Hunter2Pw",
            ],
            "--set trainer.weights (a secret in token=...)",
        ),
        (
            ["kfp", "submit", "--host", "https://admin:Hunter2Pw@kfp", "--experiment", "e"],
            "--host (a user name or password in its URL)",
        ),
        (
            [
                "kfp",
                "submit",
                "--host",
                "http://kfp",
                "--experiment",
                "e",
                "--param",
                "api_key=Hunter2Pw",
            ],
            "--param api_key (a secret in api_key=...)",
        ),
    ],
    ids=[
        "beam option URL",
        "credential flag",
        "a key under another name",
        "data URL",
        "--set",
        "--host",
        "--param",
    ],
)
def test_a_credential_in_any_option_is_refused_before_anything_runs(workdir, capsys, argv, named):
    code, lines = run_cli(argv, capsys)
    assert code == 1 and len(lines) == 1, lines
    assert lines[0].startswith(f"imgpipe: error: {named}: a credential must not be written")
    assert "Kubernetes Secret imgpipe-object-store" in lines[0]
    assert SECRET_VALUE not in lines[0] and "AKIAIOSFODNN7EXAMPLE" not in lines[0]
    assert not (workdir / "out").exists()


# ---- a label map names classes, never paths -------------------------------------------


@pytest.mark.component
def test_a_label_map_naming_paths_is_refused_in_one_line(workdir, capsys):
    imagegen.make_image_folder("two", {"cat": 2, "dog": 2})
    (workdir / "map.json").write_text(
        json.dumps({"version": 1, "labels": ["cat", "dog", "../../etc", "/etc/passwd"]})
    )
    argv = ["convert", "two", "out", "--label-map", "map.json", "--no-progress", *IN_PROCESS]
    code, lines = run_cli(argv, capsys)
    assert (code, lines) == (
        1,
        [
            "imgpipe: error: label map 'map.json': labels[2] '../../etc' cannot be a class: it "
            "has a path separator ('/' or '\\'), so it is not one folder name"
        ],
    )
    assert not any((workdir / "out").glob("**/manifest*"))


# ---- stats writes what it is asked to -------------------------------------------------


@pytest.mark.component
def test_stats_writes_the_json_only_when_asked(tmp_path, monkeypatch, capsys):
    monkeypatch.chdir(tmp_path)
    imagegen.make_image_folder("src", {"a": 3, "b": 3})
    assert cli.main(["convert", "src", "shards", "--no-progress", *IN_PROCESS]) == 0
    before = set(os.listdir(tmp_path))
    # As the README has it.
    assert cli.main(["stats", "shards", "--html", "report.html", *IN_PROCESS]) == 0
    assert set(os.listdir(tmp_path)) - before == {"report.html"}
    assert "json " not in capsys.readouterr().out
    assert cli.main(["stats", "shards", "--json", "out/stats.json", *IN_PROCESS]) == 0
    assert json.loads((tmp_path / "out" / "stats.json").read_text())["splits"]
    assert "json       out/stats.json" in capsys.readouterr().out
