"""Which local runs of a metadata store are alive.

TFX marks a step's execution RUNNING when it starts and COMPLETE or FAILED when it ends;
a run killed in between (SIGKILL, a power cut, a full node) leaves it RUNNING for good,
and its outputs look like work in progress to every later collection. So each local run
leaves a marker beside the SQLite file while it runs, with its host and pid:

  <metadata folder>/.imgpipe-runs/<run id>.json   {"host": ..., "pid": ...}

A run whose marker is missing, or names a pid that has ended on this host, is not alive:
its unfinished executions were abandoned (retention_mlmd.cancel_abandoned).
"""

from __future__ import annotations

import contextlib
import json
import os
from collections.abc import Iterator

from imgpipe.components.common.runtime import processes

MARKERS_DIR = ".imgpipe-runs"


def _folder(metadata_path: str) -> str:
    return os.path.join(os.path.dirname(os.path.abspath(metadata_path)), MARKERS_DIR)


def _marker_name(run_id: str) -> str:
    return run_id.replace(os.sep, "_") + ".json"


@contextlib.contextmanager
def running(metadata_path: str, run_id: str) -> Iterator[None]:
    """Marks `run_id` alive while the block runs (the marker stays if the process is
    killed: its pid then names a process that has ended)."""
    folder = _folder(metadata_path)
    os.makedirs(folder, exist_ok=True)
    path = os.path.join(folder, _marker_name(run_id))
    written = f"{path}.{os.getpid()}.tmp"  # renamed whole: no reader sees half a marker
    with open(written, "w") as f:
        json.dump({"run_id": run_id, "host": processes.this_host(), "pid": os.getpid()}, f)
    os.replace(written, path)
    try:
        yield
    finally:
        with contextlib.suppress(OSError):
            os.remove(path)


def live(metadata_path: str) -> set[str]:
    """The run ids alive now; the markers of runs that have ended are removed."""
    folder = _folder(metadata_path)
    found: set[str] = set()
    with contextlib.suppress(FileNotFoundError):
        for name in sorted(os.listdir(folder)):
            if not name.endswith(".json"):
                continue
            path = os.path.join(folder, name)
            try:
                with open(path) as f:
                    marker = json.load(f)
                alive = not processes.ended_here(str(marker["host"]), int(marker["pid"]))
                run_id = str(marker["run_id"])
            except (OSError, ValueError, KeyError, TypeError):
                alive, run_id = False, ""  # a marker cut short by a kill: its run ended
            if alive:
                found.add(run_id)
            else:
                with contextlib.suppress(OSError):
                    os.remove(path)
    return found
