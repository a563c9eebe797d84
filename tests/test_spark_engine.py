"""`imgpipe convert` on a Spark standalone cluster the project starts (a master and a
worker, separate JVMs, with Beam's Spark job server and the SDK worker pool): the same
bytes as the DirectRunner's, and no process left however the cluster is stopped."""

from __future__ import annotations

import glob
import os
import signal
import subprocess
import sys
import time

import pytest

from imgpipe.pipelines.cli import main as imgpipe
from imgpipe.pipelines.engines import artifacts, spark
from tests import imagegen

pytestmark = pytest.mark.engine


def _stat(pid: int) -> list[str] | None:
    """/proc/PID/stat's fields after the command name (state, ppid, pgrp, ...)."""
    try:
        with open(f"/proc/{pid}/stat") as f:
            return f.read().rsplit(")", 1)[1].split()
    except OSError:
        return None


def _living(pids: list[int]) -> list[int]:
    return [pid for pid in pids if (fields := _stat(pid)) is not None and fields[0] != "Z"]


def _processes_where(field: int, value: int) -> list[int]:
    found = []
    for entry in os.listdir("/proc"):
        if entry.isdigit() and (fields := _stat(int(entry))) and int(fields[field]) == value:
            found.append(int(entry))
    return _living(found)


def _group(pgid: int) -> list[int]:
    return _processes_where(2, pgid)


def _descendants(pid: int) -> list[int]:
    found, todo = [], [pid]
    while todo:
        children = _processes_where(1, todo.pop())
        found += children
        todo += children
    return found


def _is_java(pid: int) -> bool:
    try:
        return os.path.realpath(f"/proc/{pid}/exe") == os.path.realpath(artifacts.java())
    except OSError:
        return False


def _tree_bytes(root: str) -> dict[str, bytes]:
    """Every file under `root`, by relative path, with its bytes."""
    files = {}
    for folder, _, names in os.walk(root):
        for name in names:
            path = os.path.join(folder, name)
            with open(path, "rb") as f:
                files[os.path.relpath(path, root)] = f.read()
    return files


@pytest.fixture(scope="module")
def image_folder(tmp_path_factory) -> str:
    """Three labels, and a file that is not an image, so the skip report has an entry."""
    root = str(tmp_path_factory.mktemp("images"))
    imagegen.make_image_folder(root, {"cat": 12, "dog": 10, "owl": 8})
    imagegen.write(os.path.join(root, "dog", "notes.jpg"), b"not an image")
    return root


def test_convert_on_spark_writes_the_direct_runners_bytes_and_leaves_no_process(
    image_folder, tmp_path
):
    convert = ["convert", image_folder, "--shards", "2", "--no-progress"]
    assert imgpipe([*convert[:2], str(tmp_path / "direct"), *convert[2:]]) == 0

    with spark.spark_cluster(str(tmp_path / "cluster")) as cluster:
        assert cluster.supervisor is not None
        status = cluster.status()
        assert [(w["state"], w["cores"]) for w in status["workers"]] == [
            ("ALIVE", spark.WORKER_CORES)
        ]
        code = imgpipe([*convert[:2], str(tmp_path / "spark"), *convert[2:], *cluster.beam_args()])
        applications = cluster.status()["completedapps"]
        groups = {s.name: s.process.pid for s in cluster.supervisor.servers}
        members = [pid for pgid in groups.values() for pid in _group(pgid)]
        jvms = {name for name, pid in groups.items() if _is_java(pid)}

    assert code == 0
    # The job ran on the cluster, as one Beam application that finished ...
    assert [(a["name"].split("-")[0], a["state"]) for a in applications] == [
        ("BeamApp", "FINISHED")
    ]
    # ... and wrote what the DirectRunner wrote, byte for byte: shards, reports, manifest.
    direct = _tree_bytes(str(tmp_path / "direct"))
    assert any(name.startswith("Split-train/") and "-00001-of-00002" in name for name in direct)
    assert b"notes.jpg" in direct["skipped.json"]
    assert _tree_bytes(str(tmp_path / "spark")) == direct
    # The master, the worker and the job server are three JVMs, the pool runs beside
    # them, and nothing of theirs is left.
    assert sorted(groups) == ["job-server", "master", "worker", "worker-pool"]
    assert jvms == {"job-server", "master", "worker"}
    assert _living(members) == []
    assert glob.glob(str(tmp_path / "cluster" / "**" / "*.jar"), recursive=True) == []


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
        descendants = _descendants(command.pid)
        children = _processes_where(1, command.pid)
        # The master, the worker, the job server; and the worker pool.
        assert len(children) == 4
        assert len([pid for pid in children if _is_java(pid)]) == 3
        os.killpg(command.pid, signal.SIGINT)
        command.wait(60)
    finally:
        if command.poll() is None:
            os.killpg(command.pid, signal.SIGKILL)
            command.wait()
    time.sleep(0.5)
    assert _living(descendants) == []
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
