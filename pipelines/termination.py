"""SIGTERM and SIGINT stop a run the way Ctrl-C stops Python: with an exception in the
main thread, so that every `finally` on the way out runs and removes what the run wrote
(work folders, spill files, staged shards, temporary files).

Kubernetes sends SIGTERM on eviction and preemption, then SIGKILL after a grace period
(30 s by default); Python's default for SIGTERM is to die on the spot. Beam's in-process
runner works on threads, but signal handlers run on the main thread, which is the one
that waits for the pipeline: the exception unwinds it, and the workers' next writes
fail because their folders are gone. The `imgpipe` command and the Kubeflow container
entrypoint then exit with 128 + the signal's number, as a shell reports a process the
signal killed.

The signal is passed on to the process's descendants: Beam's multi-process runner
starts its workers as subprocesses and, on the way out, waits for them to end, which
they would not do before the runner told them to.
"""

from __future__ import annotations

import contextlib
import logging
import os
import signal
import threading
from collections.abc import Iterator

SIGNALS = (signal.SIGTERM, signal.SIGINT)


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


@contextlib.contextmanager
def stop_on_signals() -> Iterator[None]:
    """Inside the block, SIGTERM or SIGINT raises Terminated in the main thread.

    From the signal until the block is left, further signals are ignored, so that the
    clean-up runs to its end, and so are log records up to ERROR and the errors of
    other threads: the libraries on the way out (Beam logs what a DoFn raised, with its
    traceback) and worker threads whose folders or subprocesses are gone would bury the
    one line that says what happened. Whatever exception leaves the block after a
    signal leaves as Terminated: Beam, for one, re-raises what a DoFn raised as a
    RuntimeError.

    Enter it on the main thread; the signal handlers and logging are restored when it
    ends.
    """
    received: list[int] = []
    logging_disabled = logging.root.manager.disable
    thread_excepthook = threading.excepthook

    def stop(signum: int, frame: object) -> None:
        for other in SIGNALS:
            signal.signal(other, signal.SIG_IGN)
        logging.disable(logging.ERROR)
        threading.excepthook = lambda args: None
        received.append(signum)
        for pid in descendants(os.getpid()):
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, signum)
        raise Terminated(signum)

    previous = {signum: signal.signal(signum, stop) for signum in SIGNALS}
    try:
        yield
    except BaseException as e:
        if received and not isinstance(e, Terminated):
            raise Terminated(received[0]) from e
        raise
    finally:
        for signum, handler in previous.items():
            signal.signal(signum, handler)
        logging.disable(logging_disabled)
        threading.excepthook = thread_excepthook


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
