"""A stop that a signal requested, seen by the commit points of outputs.

pipelines/termination.py turns SIGTERM and SIGINT into an exception in the main thread,
and records the request here. An exception raised by a signal handler can be swallowed
on its way out: Python discards what a weakref callback or a `__del__` raises ("Exception
ignored in ..."), and so does a library's `except BaseException: pass`. CI saw it: SIGINT
during `imgpipe convert`'s imports landed in importlib's module-lock callback, and the
conversion ran on and published. So the one moment that makes an output something a
reader accepts, its manifest (manifest.write), first asks here, and refuses once a stop
was requested, whatever became of the exception.
"""

from __future__ import annotations

_requested: list[int] = []


class StopRequested(KeyboardInterrupt):
    """An output was about to be committed after a stop signal."""


def request(signum: int) -> None:
    """Records the first stop signal (termination's handlers call it)."""
    if not _requested:
        _requested.append(signum)


def requested() -> int | None:
    """The stop signal received, or None."""
    return _requested[0] if _requested else None


def clear() -> None:
    """Forgets a stop that was handled (a library caller, a test): work goes on."""
    _requested.clear()


def refuse_commit(what: str) -> None:
    """Raises StopRequested when a stop was requested: `what` must not be published."""
    if _requested:
        raise StopRequested(f"stop requested (signal {_requested[0]}): {what} not published")
