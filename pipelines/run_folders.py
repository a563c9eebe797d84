"""The run folders of Kubeflow runs, recorded in the pipeline root so that retention
finds them (retention_runs.py).

KFP v2 writes each run's artifacts below one folder of the pipeline root, two levels
above each artifact (<root>/<pipeline>/<run id>/<task>/<artifact> on KFP,
<root>/<project>/<job>/<task>_<id>/<artifact> on Vertex AI,
<root>/<pipeline>-<time>/<task>/<artifact> with kfp.local), and keeps their records in
its own metadata store, which a step cannot reach. Every step of a run records its
folder before its executor starts (the first write wins, so the time is the run's start),
in the pipeline root the package was compiled with:

  <pipeline_root>/.kubeflow-runs/run-<digest>.json   {"run_folder": ..., "registered": ...}

Only a folder recorded here is ever collected: nothing of another pipeline sharing the
root is touched. A run that fails writes nothing to the serving folder.
"""

from __future__ import annotations

import dataclasses
import hashlib
import posixpath

from imgpipe.components.common.formats import record_folders
from imgpipe.components.common.runtime import config_loader
from imgpipe.components.common.storage import fileio, launcher_mounts

RUNS_DIR = ".kubeflow-runs"
VERSION = 1
_PREFIX = "run-"
_DIGEST_CHARS = 16


@dataclasses.dataclass(frozen=True)
class RunFolder:
    """One Kubeflow run's folder.

    Attributes:
      run_folder: the store URI of the folder that holds the run's artifacts.
      registered: when its first step started, in seconds since the epoch.
    """

    run_folder: str
    registered: float
    version: int = VERSION


def run_folder_of(artifact_uri: str) -> str:
    """The run folder of one of its artifacts (two levels up), as its store's URI."""
    uri = launcher_mounts.store_uri(artifact_uri.rstrip("/"))
    return posixpath.dirname(posixpath.dirname(uri))


def record_path(pipeline_root: str, run_folder: str) -> str:
    digest = hashlib.sha256(run_folder.encode()).hexdigest()[:_DIGEST_CHARS]
    return posixpath.join(pipeline_root, RUNS_DIR, f"{_PREFIX}{digest}.json")


def register(pipeline_root: str, run_folder: str, now: float) -> bool:
    """Records the run folder unless it is recorded; True when this call recorded it."""
    fileio.makedirs(posixpath.join(pipeline_root, RUNS_DIR))
    document = config_loader.to_document(RunFolder(run_folder, now))
    return fileio.create_new(record_path(pipeline_root, run_folder), document.encode())


def registered(pipeline_root: str, problems: list[str] | None = None) -> list[RunFolder]:
    """Every recorded run folder, oldest first; a record that cannot be read is passed
    over, and named in `problems` when it is given."""
    found = record_folders.read_records(
        posixpath.join(pipeline_root, RUNS_DIR), RunFolder, VERSION, _PREFIX, problems
    )
    return sorted(found, key=lambda r: (r.registered, r.run_folder))
