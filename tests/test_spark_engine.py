"""`imgpipe convert` on a Spark standalone cluster the project starts (a master and a
worker, separate JVMs, with Beam's Spark job server and the SDK worker pool): the same
bytes as the DirectRunner's, and no process left however the cluster is stopped."""

from __future__ import annotations

import glob
import os
import signal
import subprocess
import sys
import tempfile

import pytest

from imgpipe.pipelines.cli import main as imgpipe
from imgpipe.pipelines.engines import artifacts, spark
from tests import imagegen, outputs, procfs, stopping, waiting

pytestmark = pytest.mark.engine


@pytest.fixture(scope="module")
def image_folder(tmp_path_factory) -> str:
    """Three labels, and a file that is not an image, so the skip report has an entry."""
    root = str(tmp_path_factory.mktemp("images"))
    imagegen.make_image_folder(root, {"cat": 12, "dog": 10, "owl": 8})
    imagegen.write(os.path.join(root, "dog", "notes.jpg"), b"not an image")
    return root


def test_convert_on_spark_writes_the_direct_runners_bytes_and_leaves_no_process(
    image_folder, tmp_path, monkeypatch
):
    temporary = tmp_path / "tmp"
    temporary.mkdir()
    monkeypatch.setattr(tempfile, "tempdir", str(temporary))
    convert = ["convert", image_folder, "--shards", "2", "--no-progress"]
    assert imgpipe([*convert[:2], str(tmp_path / "direct"), *convert[2:]]) == 0

    with spark.spark_cluster(str(tmp_path / "cluster")) as cluster:
        assert cluster.supervisor is not None
        status = cluster.status()
        assert [(w["state"], w["cores"]) for w in status["workers"]] == [
            ("ALIVE", spark.WORKER_CORES)
        ]
        code = imgpipe([*convert[:2], str(tmp_path / "spark"), *convert[2:], *cluster.beam_args()])
        # The driver's stop reaches the master as a message after the job's end reaches
        # the command: the application is listed as completed soon after, not at once.
        applications = waiting.until(
            lambda: cluster.status()["completedapps"], "the application listed as completed"
        )
        groups = {s.name: s.process.pid for s in cluster.supervisor.servers}
        members = [pid for pgid in groups.values() for pid in procfs.group(pgid)]
        jvms = {name for name, pid in groups.items() if procfs.is_java(pid)}

    assert code == 0
    # The job ran on the cluster, as one Beam application that finished ...
    assert [(a["name"].split("-")[0], a["state"]) for a in applications] == [
        ("BeamApp", "FINISHED")
    ]
    # ... and wrote what the DirectRunner wrote, byte for byte: shards, reports, manifest.
    direct = outputs.tree(str(tmp_path / "direct"))
    assert any(name.startswith("Split-train/") and "-00001-of-00002" in name for name in direct)
    assert b"notes.jpg" in direct["skipped.json"]
    assert outputs.tree(str(tmp_path / "spark")) == direct
    # The master, the worker and the job server are three JVMs, the pool runs beside
    # them, and nothing of theirs is left.
    assert sorted(groups) == ["job-server", "master", "worker", "worker-pool"]
    assert jvms == {"job-server", "master", "worker"}
    assert procfs.living(members) == []
    assert glob.glob(str(tmp_path / "cluster" / "**" / "*.jar"), recursive=True) == []
    # What Beam's portable runner leaves in the temporary folder (the stager's
    # submission_environment_dependencies.txt) stays in the command's own folder, which
    # goes when the process exits (tests/test_cli.py holds that).
    assert [name.split("-")[:2] for name in os.listdir(temporary)] == [["imgpipe", "run"]] * 2


def test_ctrl_c_stops_the_cluster_command_and_leaves_no_process(tmp_path):
    """`imgpipe engine spark` in the foreground, interrupted as a terminal would."""
    command = subprocess.Popen(
        [sys.executable, "-m", "imgpipe.pipelines.cli", "engine", "spark"]
        + ["--workdir", str(tmp_path)],
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
        start_new_session=True,
    )
    try:
        assert command.stdout is not None
        first = command.stdout.readline()
        assert first.startswith(f"Spark {spark.SPARK_VERSION} standalone cluster at spark://"), (
            first
        )
        beam_args = command.stdout.readline()
        assert "--job_endpoint=" in beam_args and "--environment_type=EXTERNAL" in beam_args
        descendants = procfs.descendants(command.pid)
        children = procfs.children(command.pid)
        # The master, the worker, the job server; and the worker pool.
        assert len(children) == 4
        assert len([pid for pid in children if procfs.is_java(pid)]) == 3
        os.killpg(command.pid, signal.SIGINT)
        command.wait(stopping.GIVE_UP_S)
    finally:
        if command.poll() is None:
            os.killpg(command.pid, signal.SIGKILL)
            command.wait()
    waiting.until(lambda: not procfs.living(descendants), "the cluster's processes gone")
    assert command.returncode == 0
    assert command.stdout.read().splitlines()[-1] == "Spark cluster stopped."


def test_missing_spark_jars_are_a_one_line_error_naming_the_fetch(tmp_path, monkeypatch):
    monkeypatch.setenv(artifacts.ARTIFACTS_ENV, str(tmp_path))
    result = subprocess.run(
        [sys.executable, "-m", "imgpipe.pipelines.cli", "engine", "spark"],
        capture_output=True,
        text=True,
    )
    assert result.returncode == 1
    assert result.stderr.count("\n") == 1, result.stderr
    assert result.stderr.startswith(f"imgpipe: error: the Spark {spark.SPARK_VERSION} jars")
    assert artifacts.FETCH_COMMAND in result.stderr
