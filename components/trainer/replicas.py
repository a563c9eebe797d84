"""What the launchers of worker replicas that do not share the Trainer's disk have in
common (a TFJob, kubernetes_workers.py; containers, docker_workers.py): the check that
every path the workers use is one they can see, the chief's log streamed into the
Trainer's, and each replica's log kept in the model_run artifact. The one line that
names a failed replica is workers.raise_failed, which worker processes use too.
"""

from __future__ import annotations

import contextlib
import os
import sys
import threading
from collections.abc import Callable, Iterable

from imgpipe.components.common.storage import fileio, object_store
from imgpipe.components.trainer import workers

# Opens a replica's log as it is written: (its chunks, what closes the stream).
LogStream = tuple[Iterable[bytes], Callable[[], None]]


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
    fileio.write_text(workers.log_path(log_dir, index), text)
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
