"""What every launcher of a training's worker replicas shares (launchers.py): the job's
folder, which each replica reads (save_job, load_job); where each replica's log goes;
the one line that names a failed replica (raise_failed); and, for the launchers whose
replicas do not share the Trainer's disk (a TFJob or a JobSet, kubernetes_jobs.py;
containers, docker_containers.py), the check that every path the replicas use is one they can see,
the chief's log streamed into the Trainer's, and each replica's log kept in the
model_run artifact.
"""

from __future__ import annotations

import contextlib
import os
import pickle
import posixpath
import sys
import threading
from collections.abc import Callable, Iterable
from typing import NoReturn

from imgpipe.components.common.runtime import printable
from imgpipe.components.common.storage import fileio, object_store
from imgpipe.components.trainer.several_workers import cluster

JOB_FILE = "job.pickle"
_LINE_CHARS = 500
# Opens a replica's log as it is written: (its chunks, what closes the stream).
LogStream = tuple[Iterable[bytes], Callable[[], None]]


class WorkersFailed(RuntimeError):
    """A worker failed, and the others were stopped; the message is one line."""


def log_path(log_dir: str, index: int) -> str:
    return posixpath.join(log_dir, f"worker-{index}.log")


def save_job(folder: str, job: object) -> None:
    """Writes the job into `folder` (a local path, or a pipeline root's URI)."""
    fileio.makedirs(folder)
    fileio.write_atomic(posixpath.join(folder, JOB_FILE), pickle.dumps(job))


def load_job(folder: str) -> object:
    """The job save_job wrote (the same code unpickles it: this checkout, or the same
    image in a TFJob's pods)."""
    data = fileio.read_bytes(posixpath.join(folder, JOB_FILE))
    return pickle.loads(data)  # noqa: S301 - written by this job's own Trainer


def raise_failed(
    who: str, how: str, log_text: str, workers_count: int, stopped: str, log_dir: str
) -> NoReturn:
    """Raises the one line of a failed replica: ValueError when it refused a setting
    (its own line), else WorkersFailed naming it, how it ended and its last error.

    Args:
      who: the replica, e.g. "trainer worker 1 of 2 (container ...)".
      how: how it ended, e.g. "exited with code 137".
      stopped: what became of the others, e.g. "the other workers were stopped".
    """
    line = failure_in(log_text)
    if line.startswith(f"{ValueError.__name__}: "):
        raise ValueError(
            f"{who}: {line[len(ValueError.__name__) + 2 :]} (trainer.workers={workers_count})"
        )
    raise WorkersFailed(
        f"{who} {how}{': ' + line if line else ''}; {stopped} and nothing was exported "
        f"(logs: {log_dir}); a rerun resumes from the last preemption backup"
    )


def failure_line(log: str) -> str:
    """failure_in the log file `log`; "" when it cannot be read."""
    try:
        with open(log, errors="replace") as f:
            return failure_in(f.read())
    except OSError:
        return ""


def failure_in(log_text: str) -> str:
    """The one line a failed worker wrote after cluster.ERROR_MARK, or else its log's last
    line that names an error; "" when there is none."""
    lines = log_text.splitlines()
    marked = [line for line in lines if line.startswith(cluster.ERROR_MARK)]
    if marked:
        return marked[-1][len(cluster.ERROR_MARK) :].strip()
    errors = [line for line in lines if "Error" in line]
    return printable.short(" ".join(errors[-1].split()), _LINE_CHARS) if errors else ""


def unshared_path(paths: Iterable[str], shared: Iterable[str]) -> str | None:
    """The first path that is neither on an object store nor under one of the `shared`
    local folders (the replicas' mounts), or None."""
    folders = [os.path.normpath(s) for s in shared]
    for path in paths:
        if object_store.is_object_store(path):
            continue
        local = os.path.normpath(path)
        if not any(local == f or local.startswith(f.rstrip("/") + "/") for f in folders):
            return path
    return None


def keep_log(log_dir: str, index: int, text: str) -> str:
    """Writes replica `index`'s log into log_dir (through the file seam); returns it."""
    fileio.makedirs(log_dir)
    fileio.write_text(log_path(log_dir, index), text)
    return text


class LogFollower:
    """Streams one replica's log into this process's stderr, on a thread."""

    def __init__(self, open_stream: Callable[[], LogStream]) -> None:
        self._open = open_stream
        self._thread: threading.Thread | None = None
        self._close: Callable[[], None] | None = None

    def start(self) -> None:
        if self._thread is not None:
            return
        self._thread = threading.Thread(target=self._follow, daemon=True)
        self._thread.start()

    def _follow(self) -> None:
        with contextlib.suppress(Exception):  # the stream ends with the replica, or is closed
            chunks, self._close = self._open()
            for chunk in chunks:
                sys.stderr.write(chunk.decode(errors="replace"))
                sys.stderr.flush()

    def finish(self, seconds: float = 10.0) -> None:
        """Waits a little for the rest of a finished chief's log."""
        if self._thread is not None:
            self._thread.join(seconds)

    def stop(self) -> None:
        if self._close is not None:
            with contextlib.suppress(Exception):
                self._close()
        if self._thread is not None:
            self._thread.join(1.0)
