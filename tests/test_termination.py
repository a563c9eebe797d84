"""SIGTERM and SIGINT become Terminated in the main thread, whatever wraps them on the way
out, and reach the process's children; the handlers before are restored."""

from __future__ import annotations

import logging
import os
import signal
import subprocess
import threading
import time

import pytest

from imgpipe.pipelines import termination
from tests import waiting

pytestmark = pytest.mark.unit


@pytest.mark.parametrize("signum", termination.SIGNALS)
def test_a_signal_raises_terminated_and_the_handlers_come_back(signum):
    before = {s: signal.getsignal(s) for s in termination.SIGNALS}
    with pytest.raises(termination.Terminated) as stopped:
        with termination.stop_on_signals():
            os.kill(os.getpid(), signum)
            time.sleep(5)  # interrupted at once
    assert stopped.value.signum == signum
    assert stopped.value.exit_code == 128 + signum
    assert stopped.value.signal_name == signal.Signals(signum).name
    assert {s: signal.getsignal(s) for s in termination.SIGNALS} == before
    assert logging.root.manager.disable == logging.NOTSET


def test_whatever_wraps_the_stop_leaves_as_terminated_and_a_second_signal_waits():
    with pytest.raises(termination.Terminated) as stopped:
        with termination.stop_on_signals():
            try:
                os.kill(os.getpid(), signal.SIGTERM)
                time.sleep(5)
            except BaseException as e:  # as Beam re-raises what a DoFn raised
                os.kill(os.getpid(), signal.SIGINT)  # ignored: the clean-up goes on
                raise RuntimeError("wrapped") from e
    assert stopped.value.signum == signal.SIGTERM
    assert isinstance(stopped.value.__cause__, RuntimeError)


def test_without_a_signal_errors_pass_unchanged():
    with pytest.raises(ValueError, match="bad"):
        with termination.stop_on_signals():
            raise ValueError("bad")


def test_the_signal_reaches_the_children():
    child = subprocess.Popen(["sleep", "60"])
    try:
        assert child.pid in termination.descendants(os.getpid())
        with pytest.raises(termination.Terminated):
            with termination.stop_on_signals():
                os.kill(os.getpid(), signal.SIGTERM)
                time.sleep(5)
        assert child.wait(timeout=waiting.AT_ONCE_S) == -signal.SIGTERM
    finally:
        child.kill()
        child.wait()


def test_a_stop_handled_by_a_block_of_its_own_disarms_its_deadline(monkeypatch):
    """A caller that did not install the process's handlers (a library, these tests) goes
    on after the stop: the deadline that ends a stopping process must not end it."""
    monkeypatch.setattr(termination, "STOP_DEADLINE_S", 0.2)
    before = set(threading.enumerate())  # earlier tests' deadlines (8 s) may still wait
    with pytest.raises(termination.Terminated):
        with termination.stop_on_signals():
            os.kill(os.getpid(), signal.SIGTERM)
            time.sleep(5)
    # The deadline's thread has had its say (not a sleep: on a busy machine it may not
    # yet have woken), and the process is still here.
    (deadline,) = [
        t for t in set(threading.enumerate()) - before if t.name == "imgpipe-stop-deadline"
    ]
    deadline.join(waiting.AT_ONCE_S)
    assert not deadline.is_alive()
    assert termination.received() is None


def test_a_stop_swallowed_in_a_weakref_callback_still_stops_and_commits_nothing(
    tmp_path, monkeypatch
):
    """CI: SIGINT during `imgpipe convert`'s imports landed in importlib's module-lock
    callback, whose exception Python discards ("Exception ignored in ..."), and the
    conversion ran on and published. From the signal on no manifest is written, and the
    block raises Terminated at its end."""
    import sys
    import weakref

    from imgpipe.components.common.formats import manifest
    from imgpipe.components.common.runtime import stop_request

    discarded = []
    monkeypatch.setattr(sys, "unraisablehook", lambda u: discarded.append(u.exc_type))

    class Held:
        pass

    def callback(_ref):
        os.kill(os.getpid(), signal.SIGINT)
        time.sleep(5)  # the handler raises here, and Python discards it

    held = Held()
    ref = weakref.ref(held, callback)
    with pytest.raises(termination.Terminated) as stopped:
        with termination.stop_on_signals():
            del held  # the callback runs now
            assert discarded == [termination.Terminated]
            with pytest.raises(stop_request.StopRequested):
                manifest.write(str(tmp_path), {})
            assert not (tmp_path / manifest.MANIFEST_FILE).exists()
    assert stopped.value.signum == signal.SIGINT
    assert ref() is None
    assert stop_request.requested() is None  # a handled stop is forgotten: work goes on
    manifest.write(str(tmp_path), {})


def test_a_stop_a_library_swallowed_raises_when_the_block_ends():
    with pytest.raises(termination.Terminated) as stopped:
        with termination.stop_on_signals():
            try:
                os.kill(os.getpid(), signal.SIGTERM)
                time.sleep(5)
            except BaseException:  # noqa: S110 - a library's `except BaseException: pass`
                pass
    assert stopped.value.signum == signal.SIGTERM
