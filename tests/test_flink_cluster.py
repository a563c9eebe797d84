"""The Flink session cluster the project starts: a JobManager and a TaskManager with two
slots, separate JVMs, plus Beam's job server and worker pool, all gone when the block is left (on
success, on an error, on Ctrl-C)."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time

import pytest

from imgpipe.pipelines.engines import artifacts, flink, processes
from tests import procfs, stopping, waiting

pytestmark = pytest.mark.engine


def test_the_cluster_has_two_slots_in_separate_jvms_and_stops_without_a_trace(tmp_path):
    with flink.flink_cluster(str(tmp_path)) as cluster:
        overview = cluster.overview()
        assert cluster.supervisor is not None
        groups = {s.name: s.process.pid for s in cluster.supervisor.servers}
        members = [pid for pgid in groups.values() for pid in procfs.group(pgid)]
        jvms = [pid for pid in members if procfs.is_java(pid)]
    assert overview["taskmanagers"] == 1
    assert overview["slots-total"] == 2
    assert overview["flink-version"] == flink.FLINK_VERSION
    # The JobManager and the TaskManager are two JVMs; the worker pool runs beside them ...
    assert sorted(groups) == ["job-server", "jobmanager", "taskmanager", "worker-pool"]
    assert len(jvms) == 3  # with the job server
    # ... and nothing of theirs is left.
    assert procfs.living(members) == []
    assert os.path.exists(tmp_path / "logs" / "taskmanager.log")


def test_an_error_inside_the_block_stops_the_processes(tmp_path):
    with pytest.raises(RuntimeError, match="the step failed"):
        with processes.supervised(str(tmp_path)) as supervisor:
            server = supervisor.start("sleeper", ["sh", "-c", "sleep 300 & sleep 300"])
            supervisor.wait_until(
                lambda: len(procfs.group(server.process.pid)) >= 2, "two", waiting.AT_ONCE_S
            )
            raise RuntimeError("the step failed")
    assert procfs.group(server.process.pid) == []


def test_ctrl_c_stops_the_cluster_command_and_leaves_no_process(tmp_path):
    """`imgpipe engine flink` in the foreground, interrupted as a terminal would."""
    command = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "imgpipe.pipelines.cli",
            "engine",
            "flink",
            "--workdir",
            str(tmp_path),
        ],
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
        start_new_session=True,
    )
    try:
        assert command.stdout is not None
        first = command.stdout.readline()
        assert "Flink" in first and "2 slots" in first, first
        children = procfs.children(command.pid)
        assert len(children) == 4  # JobManager, TaskManager, job server, worker pool
        os.killpg(command.pid, signal.SIGINT)
        command.wait(stopping.GIVE_UP_S)
    finally:
        if command.poll() is None:
            os.killpg(command.pid, signal.SIGKILL)
            command.wait()
    waiting.until(lambda: not procfs.living(children), "the cluster's processes gone")
    assert command.returncode == 0
    assert command.stdout.read().splitlines()[-1] == "Flink cluster stopped."


def test_ctrl_c_while_the_cluster_starts_stops_it_the_same_way(tmp_path):
    """Ctrl-C before the cluster is up (its first process has started) ends as Ctrl-C
    while it serves: everything stopped, the last line, exit 0."""
    command = subprocess.Popen(
        [sys.executable, "-m", "imgpipe.pipelines.cli", "engine", "flink"]
        + ["--workdir", str(tmp_path)],
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
        start_new_session=True,
    )
    started: list[int] = []
    try:
        while command.poll() is None and not (started := procfs.children(command.pid)):
            time.sleep(0.01)
        os.killpg(command.pid, signal.SIGINT)
        output, _ = command.communicate(timeout=stopping.GIVE_UP_S)
    finally:
        if command.poll() is None:
            os.killpg(command.pid, signal.SIGKILL)
            command.wait()
    assert started
    waiting.until(lambda: not procfs.living(started), "the started processes gone")
    assert command.returncode == 0, output
    assert output.splitlines()[-1] == "Flink cluster stopped."
    assert "Flink 1" not in output  # it never served


def test_a_supervisor_killed_outright_leaves_no_server(tmp_path):
    script = (
        "import sys, time; from imgpipe.pipelines.engines import processes\n"
        "with processes.supervised(sys.argv[1]) as s:\n"
        "    print(s.start('sleeper', ['sleep', '300']).process.pid, flush=True)\n"
        "    time.sleep(300)\n"
    )
    parent = subprocess.Popen(
        [sys.executable, "-c", script, str(tmp_path)], stdout=subprocess.PIPE, text=True
    )
    assert parent.stdout is not None
    server = int(parent.stdout.readline())
    parent.kill()
    parent.wait()
    waiting.until(lambda: not procfs.living([server]), "the server gone with its supervisor")


def test_a_missing_artifact_is_a_one_line_error_naming_the_fetch(tmp_path, monkeypatch):
    monkeypatch.setenv(artifacts.ARTIFACTS_ENV, str(tmp_path))
    result = subprocess.run(
        [
            sys.executable,
            "-m",
            "imgpipe.pipelines.cli",
            "engine",
            "flink",
            "--workdir",
            str(tmp_path / "work"),
        ],
        capture_output=True,
        text=True,
        env=os.environ,
    )
    assert result.returncode == 1
    assert result.stderr.count("\n") == 1, result.stderr
    assert result.stderr.startswith(
        f"imgpipe: error: the Flink {flink.FLINK_VERSION} cluster jars are not in"
    )
    assert "make engines-fetch" in result.stderr
    with pytest.raises(artifacts.MissingArtifact, match=flink.JOB_SERVER_COORDINATES):
        flink.job_server_lib()


def test_stopping_returns_only_when_every_process_of_every_group_is_gone(tmp_path):
    """A server whose children ignore SIGTERM and keep forking: stop_all still leaves
    nothing running when it returns (SIGKILL is waited for, not just sent)."""
    stubborn = "trap '' TERM; : > \"$0\"; while true; do sleep 0.01 & wait; done"
    ready = [tmp_path / f"stubborn-{i}.ready" for i in range(3)]
    with processes.supervised(str(tmp_path)) as supervisor:
        servers = [
            supervisor.start(f"stubborn-{i}", ["sh", "-c", stubborn, str(path)])
            for i, path in enumerate(ready)
        ]
        groups = [server.process.pid for server in servers]
        # Each has set its trap before the stop: the SIGTERM is ignored, as meant.
        waiting.until(lambda: all(path.exists() for path in ready), "the traps set")
        assert processes.running_in_groups(groups)
    assert processes.running_in_groups(groups) == []
