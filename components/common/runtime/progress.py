"""Counts of the work a Beam step has done, for a progress bar on this machine's terminal.

A local command that shows a bar (`imgpipe convert`, and `imgpipe run local` for its
steps) makes a local folder and names it to the work: `imgpipe convert` passes it to
run_conversion as `progress_dir`; `imgpipe run local` names it in the environment
variable PROGRESS_DIR_ENV while a step runs, and the executors that count
(ImageExampleGen's, ImageStatistics') read it with `folder_from_env`. Nothing else sets
that variable: a Kubeflow pod, a remote worker or a library caller never has it, and
their work counts nothing.

In the folder, the step writes how many items there are, and what is done to them
(`write_total`), once it knows; each Beam DoFn instance counts the items it has done
into a file of its own (`Counter`); the command sums them (`read`). Every write is best
effort: a count that cannot be written is dropped and the DoFn stops counting, so a bar
never fails or slows the work. A remote worker given a local folder's path (a Flink
runner named in beam_args) finds no such folder and counts nothing.
"""

from __future__ import annotations

import dataclasses
import os
import time
import uuid

PROGRESS_DIR_ENV = "IMGPIPE_PROGRESS_DIR"
TOTAL_FILE = "total"
_COUNT_PREFIX = "count-"
_TEMP_SUFFIX = ".tmp"
# A DoFn rewrites its count file at most this often: a few writes a second per worker.
WRITE_INTERVAL_S = 0.3


def folder_from_env() -> str | None:
    """The progress folder the local command named for this step, or None."""
    return os.environ.get(PROGRESS_DIR_ENV) or None


def _write(path: str, text: str) -> bool:
    """Writes `text` to `path` whole (through a temporary file); False when it could not."""
    temp = path + _TEMP_SUFFIX
    try:
        with open(temp, "w") as f:
            f.write(text)
        os.replace(temp, path)
    except OSError:
        return False
    return True


def write_total(progress_dir: str | None, total: int, what: str) -> None:
    """Says the step has `total` items to do, and what is done to them ("converted"); a
    no-op without a folder, and dropped when it cannot be written."""
    if progress_dir:
        _write(os.path.join(progress_dir, TOTAL_FILE), f"{total}\n{what}\n")


class Counter:
    """Counts one DoFn instance's items into a file of its own in the progress folder
    (WRITE_INTERVAL_S apart at most; `flush` at the end of a bundle). Without a folder,
    or once a write failed, it counts in memory only."""

    def __init__(self, progress_dir: str | None):
        self._path = None
        if progress_dir:
            name = f"{_COUNT_PREFIX}{os.getpid()}-{uuid.uuid4().hex}"
            self._path = os.path.join(progress_dir, name)
        self._count = 0
        self._last_write = 0.0

    def add(self, n: int) -> None:
        self._count += n
        if self._path and time.monotonic() - self._last_write > WRITE_INTERVAL_S:
            self.flush()

    def flush(self) -> None:
        if self._path:
            if not _write(self._path, str(self._count)):
                self._path = None  # the folder is gone (the command ended) or not here
            self._last_write = time.monotonic()


@dataclasses.dataclass(frozen=True)
class Progress:
    total: int
    what: str
    done: int


def read(progress_dir: str) -> Progress | None:
    """The step's total and the items done so far, summed over the DoFns' files; None
    until the step has written its total (or when the folder cannot be read)."""
    try:
        with open(os.path.join(progress_dir, TOTAL_FILE)) as f:
            total_line, what = (f.read().splitlines() + ["", ""])[:2]
        total = int(total_line)
        names = os.listdir(progress_dir)
    except (OSError, ValueError):
        return None
    done = 0
    for name in names:
        if name.startswith(_COUNT_PREFIX) and not name.endswith(_TEMP_SUFFIX):
            try:
                with open(os.path.join(progress_dir, name)) as f:
                    done += int(f.read() or 0)
            except (OSError, ValueError):
                pass
    return Progress(total, what, min(done, total))
