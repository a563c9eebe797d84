"""The serving lease dies with its holder (components/common/storage/serving_lock.py): a
holder killed on this host is noticed at once, one that stopped heartbeating anywhere
after STALE_SECONDS, one between steps is waited for, and the wait is said as a warning
with who holds it; a step that works renews it, hands it on, and gives it back when it
fails."""

from __future__ import annotations

import dataclasses
import json
import logging
import signal
import socket
import subprocess
import threading
import time
import types

import pytest

from imgpipe.components.common.storage import serving_lock
from tests import waiting

pytestmark = pytest.mark.unit


def plant(serving: str, **fields) -> serving_lock.Lease:
    """A lease another run holds, written as that run would have written it."""
    lease = serving_lock.Lease(
        **{"owner": "other-run", "token": "t0", "expires": time.time() + 3600} | fields
    )
    serving_lock.fileio.makedirs(serving)
    with open(serving_lock.path_of(serving), "w") as f:
        json.dump(dataclasses.asdict(lease), f)
    return lease


def killed_pid() -> int:
    """The pid of a process that was running here and was SIGKILLed."""
    process = subprocess.Popen(["sleep", "60"])
    process.send_signal(signal.SIGKILL)
    process.wait()
    return process.pid


def test_a_holder_killed_on_this_host_is_noticed_at_once(tmp_path, monkeypatch, caplog):
    serving = str(tmp_path / "serving")
    plant(serving, host=socket.gethostname(), pid=killed_pid(), beat=time.time(), working=True)
    # "At once": without waiting a single poll (counted, not timed: a busy machine is slow).
    polls: list[float] = []
    clock = types.SimpleNamespace(
        time=time.time, gmtime=time.gmtime, strftime=time.strftime, sleep=polls.append
    )
    monkeypatch.setattr(serving_lock, "time", clock)
    with caplog.at_level(logging.WARNING):
        lease = serving_lock.acquire(serving, "run-2")
    assert polls == []
    assert serving_lock.current(serving) == lease and lease.owner == "run-2"
    assert "taking over the lease of other-run: its holder, pid" in caplog.text
    assert "has ended" in caplog.text


def test_a_holder_elsewhere_that_stopped_heartbeating_is_taken_over(tmp_path, caplog):
    serving = str(tmp_path / "serving")
    silent = time.time() - serving_lock.STALE_SECONDS - 30
    plant(serving, host="another-pod", pid=7, beat=silent, working=True)
    with caplog.at_level(logging.WARNING):
        assert serving_lock.acquire(serving, "run-2").owner == "run-2"
    assert "sent no heartbeat for" in caplog.text


def test_a_run_between_its_steps_is_waited_for_and_the_wait_is_said(tmp_path, monkeypatch, caplog):
    monkeypatch.setattr(serving_lock, "POLL_SECONDS", 0.02)
    serving = str(tmp_path / "serving")
    held = plant(serving, host="another-pod", pid=7, beat=time.time() - 9999, working=False)
    taken: list[serving_lock.Lease] = []
    with caplog.at_level(logging.WARNING):
        waiter = threading.Thread(target=lambda: taken.append(serving_lock.acquire(serving, "r2")))
        waiter.start()
        waiting.until(lambda: "waiting for another retrain" in caplog.text, "the wait said")
        assert not taken
        assert serving_lock.release(serving, held.token)
        waiter.join(waiting.AT_ONCE_S)
    assert taken and taken[0].owner == "r2"
    assert "waiting for another retrain to finish (other-run, between its steps)" in caplog.text
    assert "the lease is ours after" in caplog.text


def test_a_working_step_renews_hands_on_and_gives_back_on_failure(tmp_path, monkeypatch):
    monkeypatch.setattr(serving_lock, "BEAT_SECONDS", 0.05)
    serving = str(tmp_path / "serving")
    lease = serving_lock.acquire(serving, "run-1")
    with serving_lock.hold(serving, lease.token):
        first = serving_lock.current(serving)
        assert first.working and first.host == socket.gethostname()
        waiting.until(lambda: serving_lock.current(serving).beat > first.beat, "a heartbeat")
    between = serving_lock.current(serving)
    assert between.token == lease.token and not between.working  # handed on
    with pytest.raises(RuntimeError, match="the step failed"):
        with serving_lock.hold(serving, lease.token):
            raise RuntimeError("the step failed")
    assert serving_lock.current(serving) is None  # the run stops: given back
    # Holding a lease another run has taken since writes nothing.
    other = serving_lock.acquire(serving, "run-2")
    with serving_lock.hold(serving, lease.token):
        pass
    assert serving_lock.current(serving) == other


def test_a_dead_runs_lease_taken_over_is_named_for_the_runs_summary(tmp_path):
    from imgpipe.components.champion.executor import Executor
    from imgpipe.components.common.formats import champion
    from imgpipe.components.common.formats.artifact_types import ChampionArtifact
    from imgpipe.pipelines import run_summary

    serving = str(tmp_path / "serving")
    plant(serving, host=socket.gethostname(), pid=killed_pid(), beat=time.time(), working=True)
    output = ChampionArtifact()
    output.uri = str(tmp_path / "champion")
    Executor().Do({}, {"champion": [output]}, {"serving_dir": serving})
    resolved = champion.read(output.uri)
    try:
        assert resolved.records_note[0].startswith(
            "took over the serving lease of other-run: its holder, pid"
        )
        assert run_summary.champion_lines(output.uri)[1].startswith(
            "serving folder       took over the serving lease of other-run"
        )
    finally:
        champion.release_run_lease(output.uri)
    assert serving_lock.current(serving) is None
