"""Processes as /proc shows them, for the engine tests: read independently of the
supervisor's own bookkeeping (pipelines/engines/processes.py), which they check."""

from __future__ import annotations

import os

from imgpipe.pipelines.engines import artifacts

_PPID, _PGRP = 1, 2  # fields of /proc/PID/stat after the command name


def stat(pid: int) -> list[str] | None:
    """/proc/PID/stat's fields after the command name (state, ppid, pgrp, ...)."""
    try:
        with open(f"/proc/{pid}/stat") as f:
            return f.read().rsplit(")", 1)[1].split()
    except OSError:
        return None


def living(pids: list[int]) -> list[int]:
    """Those of `pids` that have not ended (a zombie has ended)."""
    return [pid for pid in pids if (fields := stat(pid)) is not None and fields[0] != "Z"]


def _where(field: int, value: int) -> list[int]:
    found = []
    for entry in os.listdir("/proc"):
        if entry.isdigit() and (fields := stat(int(entry))) and int(fields[field]) == value:
            found.append(int(entry))
    return living(found)


def group(pgid: int) -> list[int]:
    """The living members of a process group."""
    return _where(_PGRP, pgid)


def children(pid: int) -> list[int]:
    return _where(_PPID, pid)


def descendants(pid: int) -> list[int]:
    found, todo = [], [pid]
    while todo:
        below = children(todo.pop())
        found += below
        todo += below
    return found


def is_java(pid: int) -> bool:
    """Whether the process runs the environment's Java."""
    try:
        return os.path.realpath(f"/proc/{pid}/exe") == os.path.realpath(artifacts.java())
    except OSError:
        return False
