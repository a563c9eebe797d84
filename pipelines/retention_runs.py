"""Retention on Kubeflow: the run folders of earlier runs in the pipeline root.

KFP keeps its artifacts' records in its own metadata store, which a step cannot reach,
and cleans run records but never artifacts; so each run records its folder in the
pipeline root (run_folders.py), and the collection at the end of a run (its Pusher's
step) and `imgpipe gc` delete, of every recorded folder but the collecting run's own:

- nothing, while the folder is younger than `retention.kubeflow_run_hours` (its run may
  still be going);
- else every artifact but the Examples of the spans whose records stay (the window's
  reach); the folder as a whole, and then its record, once none of them is left.

A crash at any moment leaves a state the next collection finishes: a folder goes before
its record, and a span's record before its Examples (retention.py). KFP's cache never
hands a step an artifact that is gone: ImageExampleGen and the ChampionResolver are never
cached (kubeflow/compiler.py), so every later step's inputs are new to each run.
"""

from __future__ import annotations

import posixpath
from collections.abc import Sequence

from imgpipe.pipelines.retention import Plan, Removal

_HOUR_S = 3600.0
_EARLIER_ARTIFACT = "an earlier Kubeflow run's artifact; no span kept needs it"


def run_folders_plan(
    pipeline_root: str,
    kept_examples: Sequence[str],
    young_hours: float,
    now: float,
    this_run_folder: str = "",
) -> Plan:
    """What goes from the recorded run folders (see the module docstring).

    Args:
      pipeline_root: the pipeline root that records them.
      kept_examples: the Examples URIs of the spans whose records stay.
      young_hours: a folder registered less than this long ago stays whole.
      now: seconds since the epoch.
      this_run_folder: the collecting run's own folder, which stays.
    """
    from imgpipe.components.common.storage import fileio, launcher_mounts
    from imgpipe.pipelines import run_folders

    problems: list[str] = []
    removals: list[Removal] = []
    kept: list[str] = []
    kept_uris = [launcher_mounts.store_uri(u).rstrip("/") for u in kept_examples]
    for folder in run_folders.registered(pipeline_root, problems):
        path = folder.run_folder
        if path == this_run_folder:
            continue
        age_hours = (now - folder.registered) / _HOUR_S
        if age_hours < young_hours:
            kept.append(f"{path}: a run that began {age_hours:.1f} h ago may still be going")
            continue
        inside = [u for u in kept_uris if u.startswith(path + "/")]
        if not inside:
            removals.append(
                Removal(path, "an earlier Kubeflow run's folder; no span kept needs it")
            )
            removals.append(
                Removal(run_folders.record_path(pipeline_root, path), "its run folder is gone")
            )
            continue
        for task in fileio.list_dir(path):
            task_path = posixpath.join(path, task)
            if not any(u.startswith(task_path + "/") for u in inside):
                removals.append(Removal(task_path, _EARLIER_ARTIFACT))
                continue
            for artifact in fileio.list_dir(task_path):
                artifact_path = posixpath.join(task_path, artifact)
                if any(u == artifact_path or u.startswith(artifact_path + "/") for u in inside):
                    kept.append(f"{artifact_path}: the Examples of a span the window can read")
                else:
                    removals.append(Removal(artifact_path, _EARLIER_ARTIFACT))
    kept.extend(
        f"{p}: a run folder record that cannot be read; its folder is left" for p in problems
    )
    return Plan(tuple(removals), tuple(kept))
