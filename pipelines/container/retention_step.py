"""Retention in a Kubeflow step (pipelines/retention_runs.py): every step records its
run's folder in the pipeline root before its executor starts, and the Pusher's step
collects after its executor. The compiler says which (kfp_contract.RUN_FOLDERS_ENV).

Neither ever fails the step: a record that cannot be written, or a collection that
cannot finish, is one warning line, and the next run's collection does the work.
"""

from __future__ import annotations

import json
import logging
import time
from collections.abc import Mapping
from typing import Any

from imgpipe.pipelines.kfp_contract import (
    RUN_FOLDERS_COLLECT,
    RUN_FOLDERS_ENV,
    RUN_FOLDERS_PIPELINE_ROOT,
    RUN_FOLDERS_RETENTION,
    RUN_FOLDERS_SERVING_DIR,
    RUN_FOLDERS_TRAINER_SPANS,
)

_log = logging.getLogger(__name__)


def settings(environ: Mapping[str, str]) -> dict[str, Any] | None:
    """The compiler's retention settings for this step; None when it wrote none."""
    text = environ.get(RUN_FOLDERS_ENV, "")
    if not text:
        return None
    try:
        document = json.loads(text)
        if not isinstance(document, dict) or not document.get(RUN_FOLDERS_PIPELINE_ROOT):
            raise ValueError(f"no {RUN_FOLDERS_PIPELINE_ROOT!r}")
    except ValueError as e:
        _log.warning(
            "retention: %s is not the compiler's settings (%s): skipped", RUN_FOLDERS_ENV, e
        )
        return None
    return document


def run_folder(executor_input: Any, remote_of: Mapping[str, str]) -> str:
    """The run's folder, from the step's first output artifact; "" when it has none."""
    from imgpipe.pipelines import run_folders as records

    for key in sorted(executor_input.outputs.artifacts):
        for artifact in executor_input.outputs.artifacts[key].artifacts:
            return records.run_folder_of(remote_of.get(artifact.uri, artifact.uri))
    return ""


def record(step_settings: Mapping[str, Any], folder: str, now: float | None = None) -> None:
    """Records the run's folder in the pipeline root, once a run."""
    from imgpipe.pipelines import run_folders as records

    if not folder:
        return
    root = step_settings[RUN_FOLDERS_PIPELINE_ROOT]
    try:
        records.register(root, folder, time.time() if now is None else now)
    except (OSError, ValueError) as e:
        _log.warning(
            "retention: could not record run folder %s in %s (%s); it is not collected",
            folder,
            root,
            e,
        )


def collect(step_settings: Mapping[str, Any], folder: str) -> str:
    """The collection at the end of a run (the Pusher's step); returns its summary line,
    "" when this step does not collect."""
    from imgpipe.pipelines import collect as collect_lib
    from imgpipe.pipelines import retention

    wanted = step_settings.get(RUN_FOLDERS_COLLECT)
    if not wanted:
        return ""
    try:
        scope = collect_lib.Scope(
            serving_dir=wanted[RUN_FOLDERS_SERVING_DIR],
            retention=retention.RetentionConfig(**wanted[RUN_FOLDERS_RETENTION]),
            trainer_spans=int(wanted[RUN_FOLDERS_TRAINER_SPANS]),
            pipeline_root=step_settings[RUN_FOLDERS_PIPELINE_ROOT],
            this_run_folder=folder,
        )
        summary = collect_lib.collect(scope, owner=f"retention after {folder}", strict=False)
    except (OSError, ValueError, TypeError, KeyError) as e:
        line = f"retention: not collected ({e}); the next run collects"
        _log.warning("%s", line)
        return line
    line = f"retention: {summary.summary()}"
    _log.info("%s", line)
    for problem in summary.problems:
        _log.warning("retention: %s", problem)
    return line
