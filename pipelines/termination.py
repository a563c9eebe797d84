"""SIGTERM and SIGINT stop a run the way Ctrl-C stops Python: with an exception in the
main thread, so that every `finally` on the way out runs and removes what the run wrote
(work folders, spill files, staged shards, temporary files). The stop is bounded: the
process ends within STOP_DEADLINE_S of the signal, at any moment, whatever it is doing.

Kubernetes sends SIGTERM on eviction and preemption, then SIGKILL after a grace period
(30 s by default); Python's default for SIGTERM is to die on the spot, and a container's
PID 1 ignores a signal it has no handler for. Beam's in-process runner works on threads,
but signal handlers run on the main thread, which is the one that waits for the
pipeline: the exception unwinds it, and the workers' next writes fail because their
folders are gone. The `imgpipe` command and the Kubeflow container entrypoint then exit
with 128 + the signal's number, as a shell reports a process the signal killed.

Four things make the bound hold at any moment, not only at the convenient ones:
- `install()` sets the handlers first thing in a process, so a signal during the
  imports (seconds) stops it too; a signal that arrives once the command's work is done
  (`ending`) does not undo it: the process ends as it would have, at once.
- A watchdog thread wakes on the signal itself (`signal.set_wakeup_fd`: the C-level
  handler writes to a pipe even while the main thread is inside a long C call), passes
  the signal on to the process's descendants, and ends the process STOP_DEADLINE_S
  later if the clean-up has not finished by then.
- The exit does not wait for the threads of the abandoned work. A library thread that
  the stop cut off may never end: Beam's state sampler starts a non-daemon thread per
  bundle and stops it in a `finally` only when a flag set one line after the start says
  so, and a signal between the two left it running, which held `imgpipe convert` in the
  interpreter's thread join for good (CI: 120 s, then the test's timeout).

- An exception raised by a signal handler can be swallowed: Python discards what a
  weakref callback or a `__del__` raises (CI: SIGINT during `imgpipe convert`'s imports
  landed in importlib's module-lock callback, and the conversion ran on and published).
  The request is recorded (components/common/runtime/stop_request.py): an output's
  commit point, its manifest, refuses from then on, and `stop_on_signals` raises again
  at its start and its end.

The signal is passed on to the process's descendants: Beam's multi-process runner
starts its workers as subprocesses and, on the way out, waits for them to end, which
they would not do before the runner told them to.
"""

from __future__ import annotations

import contextlib
import dataclasses
import logging
import os
import signal
import threading
import time
from collections.abc import Iterator

from imgpipe.components.common.runtime import stop_request

SIGNALS = (signal.SIGTERM, signal.SIGINT)
# From the signal to the process's end, at most: the clean-up's budget, inside the 10 s
# bound a stop is held to (tests/stopping.py) and Kubernetes' default grace period of 30 s
# (docs/kubeflow.md, "Between SIGTERM and SIGKILL"). The clean-ups measured here take under
# a second: removing a run's work folders and giving back the serving lease.
STOP_DEADLINE_S = 8.0


class Terminated(KeyboardInterrupt):
    """SIGTERM or SIGINT arrived. A KeyboardInterrupt, so that code written for Ctrl-C
    (and `except Exception`, which lets it through) treats both alike."""

    def __init__(self, signum: int):
        super().__init__(signum)
        self.signum = signum

    @property
    def signal_name(self) -> str:
        return signal.Signals(self.signum).name

    @property
    def exit_code(self) -> int:
        return 128 + self.signum


# Phases of a process, as the handler treats a signal in each.
_STARTING, _WORKING, _ENDING = "starting", "working", "ending"


@dataclasses.dataclass
class _Process:
    """The process's stop state; one per process, changed under `lock`."""

    lock: threading.Lock = dataclasses.field(default_factory=threading.Lock)
    installed: bool = False
    phase: str = _STARTING
    signum: int | None = None  # the first signal received
    raised: bool = False  # Terminated was raised in the main thread
    handled: bool = False  # caught on purpose by a command a signal is meant to end
    interruptible: bool = False  # the ending phase waits where a signal may cut it short
    exit_code: int | None = None  # the command's own code, once its work is done
    deadline_armed: bool = False
    generation: int = 0  # a stop handled and forgotten (_reset) disarms its deadline
    reason: str = ""  # why the process stopped itself (`deadline`); "" for a signal


_process = _Process()


def received() -> int | None:
    """The first stop signal this process received, or None."""
    return _process.signum


def install() -> None:
    """Stop handlers for the whole process: call it first thing in main (the `imgpipe`
    command and the pod's entrypoint do). Idempotent; main thread only."""
    if _process.installed:
        return
    _process.installed = True
    for signum in SIGNALS:
        signal.signal(signum, _on_signal)
    read_end, write_end = os.pipe()
    os.set_blocking(write_end, False)
    try:
        signal.set_wakeup_fd(write_end, warn_on_full_buffer=False)
    except ValueError:  # not the main thread: the handler alone arms the deadline
        os.close(read_end)
        os.close(write_end)
        return
    threading.Thread(
        target=_watch_wakeups, args=(read_end,), name="imgpipe-stop-watchdog", daemon=True
    ).start()


def _watch_wakeups(read_end: int) -> None:
    while True:
        try:
            data = os.read(read_end, 64)
        except OSError:
            return
        for signum in data:
            if signum in SIGNALS:
                _note(signum)


def _note(signum: int) -> bool:
    """Records the first stop signal, passes it on and arms the deadline; from any
    thread. True for the first one."""
    stop_request.request(signum)  # the commit points refuse from now on
    with _process.lock:
        first = _process.signum is None
        if first:
            _process.signum = signum
        arm = not _process.deadline_armed
        _process.deadline_armed = True
        generation = _process.generation
    if first:
        for pid in descendants(os.getpid()):
            with contextlib.suppress(ProcessLookupError, PermissionError):
                os.kill(pid, signum)
    if arm:
        threading.Thread(
            target=_end_at_deadline,
            args=(signum, generation),
            name="imgpipe-stop-deadline",
            daemon=True,
        ).start()
    return first


def _end_at_deadline(signum: int, generation: int) -> None:
    """Ends the process STOP_DEADLINE_S after the signal if it is still here: a clean-up
    that hangs (a library's wait, a store that does not answer) does not hold a node's
    shutdown, or a scheduler's, for longer."""
    time.sleep(STOP_DEADLINE_S)
    if _process.generation != generation:
        return  # the stop was handled, and the process goes on (a library caller)
    code = _process.exit_code if _process.exit_code is not None else 128 + signum
    with contextlib.suppress(OSError):
        why = stop_reason(signum)
        os.write(
            2,
            f"imgpipe: error: {why}; the clean-up took over {STOP_DEADLINE_S:g} s "
            "and was cut short: run the command again to finish\n".encode(),
        )
    os._exit(code)


def stop_reason(signum: int) -> str:
    """Why the process was stopped: the deadline's reason, or the signal."""
    return _process.reason or f"stopped by {signal.Signals(signum).name}"


def stop_line(signum: int) -> str:
    """The one line a command that was stopped ends with."""
    return (
        f"imgpipe: error: {stop_reason(signum)} before finishing; run the command again to finish"
    )


@contextlib.contextmanager
def deadline(seconds: float, reason: str) -> Iterator[None]:
    """Stops the process as SIGTERM does, `seconds` from now, unless the block has ended
    by then: work that hangs (a read that never returns, a library's deadlock) ends,
    gives back what it holds and publishes nothing, within STOP_DEADLINE_S. `reason` is
    what the stop's line says; `seconds` 0 or less sets no deadline."""
    if seconds <= 0:
        yield
        return

    def stop() -> None:
        _process.reason = reason
        os.kill(os.getpid(), signal.SIGTERM)

    timer = threading.Timer(seconds, stop)
    timer.name, timer.daemon = "imgpipe-run-deadline", True
    timer.start()
    try:
        yield
    finally:
        timer.cancel()


def _on_signal(signum: int, frame: object) -> None:
    """The Python-level handler (main thread): quiets the way out and raises Terminated,
    once, unless the work is done."""
    for other in SIGNALS:
        signal.signal(other, signal.SIG_IGN)
    logging.disable(logging.ERROR)
    threading.excepthook = lambda args: None
    _note(signum)
    if _process.phase == _ENDING and not _process.interruptible:
        return  # the work is done: the exit goes on, bounded by the deadline
    if not _process.raised:
        _process.raised = True
        raise Terminated(signum)


@contextlib.contextmanager
def stop_on_signals() -> Iterator[None]:
    """Inside the block, SIGTERM or SIGINT raises Terminated in the main thread.

    From the signal until the process ends, further signals are ignored, so that the
    clean-up runs to its end, and so are log records up to ERROR and the errors of
    other threads: the libraries on the way out (Beam logs what a DoFn raised, with its
    traceback) and worker threads whose folders or subprocesses are gone would bury the
    one line that says what happened. Whatever exception leaves the block after a
    signal leaves as Terminated: Beam, for one, re-raises what a DoFn raised as a
    RuntimeError. A signal that arrived before the block (during the imports) raises at
    its start; one whose Terminated was swallowed on its way out (a weakref callback or
    a `__del__` discards what it raises) raises at its end, and from the signal on no
    output is committed (stop_request: manifest.write refuses).

    Enter it on the main thread. Logging comes back when it ends. Where `install()` was
    not called (a library caller, a test), the block installs the handlers and restores
    them when it ends.
    """
    installed_here = not _process.installed
    previous = {signum: signal.getsignal(signum) for signum in SIGNALS}
    logging_disabled = logging.root.manager.disable
    thread_excepthook = threading.excepthook
    if installed_here:
        for signum in SIGNALS:
            signal.signal(signum, _on_signal)
    _process.phase = _WORKING
    try:
        if _process.signum is not None:  # before the block, raised or swallowed
            _process.raised = True
            raise Terminated(_process.signum)
        yield
        if _process.signum is not None and not _process.handled:  # swallowed on the way
            raise Terminated(_process.signum)
    except BaseException as e:
        first = _process.signum
        if first is not None and not isinstance(e, Terminated):
            raise Terminated(first) from e
        raise
    finally:
        logging.disable(logging_disabled)  # the one line that says what happened is next
        threading.excepthook = thread_excepthook
        if installed_here:
            for signum, handler in previous.items():
                signal.signal(signum, handler)
            _reset()


def _reset() -> None:
    """Forgets a stop handled by a block that installed its own handlers: the process
    goes on (a test, a library caller), and a later block starts afresh."""
    stop_request.clear()
    with _process.lock:
        _process.phase = _STARTING
        _process.signum = None
        _process.raised = False
        _process.handled = False
        _process.deadline_armed = False
        _process.generation += 1
        _process.reason = ""


def stop_handled() -> None:
    """The block caught Terminated on purpose (a command a signal is meant to end, such
    as `imgpipe engine`) and stopped what it started: stop_on_signals lets it return
    rather than raising the stop again. Outputs stay refused (stop_request)."""
    _process.handled = True


def ending(exit_code: int) -> None:
    """The command's work is done with `exit_code`: a signal from now on does not raise
    (except where `joining` says it may) and the deadline, if it fires, keeps this code."""
    _process.exit_code = exit_code
    _process.phase = _ENDING


@contextlib.contextmanager
def joining() -> Iterator[None]:
    """A wait of the ending phase that a signal may cut short (the join of threads):
    the signal raises Terminated in it, which the block swallows."""
    _process.interruptible = True
    try:
        yield
    except Terminated:
        pass
    finally:
        _process.interruptible = False


def descendants(pid: int) -> list[int]:
    """The ids of the processes below `pid`, from /proc; none where there is no /proc."""
    children: dict[int, list[int]] = {}
    try:
        entries = os.listdir("/proc")
    except OSError:
        entries = []
    for entry in entries:
        if not entry.isdigit():
            continue
        try:
            with open(f"/proc/{entry}/stat") as f:
                # "pid (name) state ppid ...": the name may hold spaces and parentheses.
                parent = int(f.read().rsplit(")", 1)[1].split()[1])
        except (OSError, ValueError, IndexError):
            continue  # not a process, or one that has just ended
        children.setdefault(parent, []).append(int(entry))
    found, queue = [], [pid]
    while queue:
        for child in children.get(queue.pop(), []):
            found.append(child)
            queue.append(child)
    return found
