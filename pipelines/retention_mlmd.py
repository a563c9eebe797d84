"""Retention in the pipeline root of local runs: which artifacts TFX's metadata store
(SQLite MLMD) says no one needs, and their deletion, marked in MLMD (pipelines/retention.py
has the rules and the order that survives a crash)."""

from __future__ import annotations

import posixpath
from collections.abc import Collection

from imgpipe.pipelines.retention import Plan, Removal

# MLMD's execution states whose outputs are final (the others: a run in progress).
_FINISHED = ("COMPLETE", "CACHED", "FAILED", "CANCELED")
# TFX's launcher keeps, per step, a folder of each execution's own records under
# <step>/.system/ (outputs_utils: the executor's output and temporary files, the
# driver's output, the stateful working folder). It empties them when the execution ends
# but never removes them: one or two folders a step a run, for good.
_TFX_SYSTEM_DIR = ".system"
_TFX_EXECUTION_RECORDS = ("executor_execution", "driver_execution", "stateful_working_dir")


def _store(metadata_path: str):
    from ml_metadata.metadata_store import metadata_store
    from tfx.orchestration import metadata

    return metadata_store.MetadataStore(metadata.sqlite_metadata_connection_config(metadata_path))


def _under(uri: str, root: str) -> bool:
    root = root.rstrip("/") + "/"
    return uri.startswith(root)


def pipeline_root_plan(
    metadata_path: str,
    pipeline_root: str,
    pipeline_name: str,
    window_examples: Collection[str],
    keep_stop_reports: int,
) -> Plan:
    """What goes from the pipeline root: every artifact under it that is not an input or
    output of a step's latest finished execution, of an execution still running, or the
    Examples of a span in the window (`window_examples`, their URIs); every one a
    collection marked and did not finish; and what no artifact row names (_leftovers)."""
    from ml_metadata.proto import metadata_store_pb2

    store = _store(metadata_path)
    state_names = _state_names()
    keep = {uri.rstrip("/") for uri in window_examples}
    kept = [f"{uri}: a span of the window" for uri in sorted(keep)]
    keep_ids: set[int] = set()
    steps = _steps(store, pipeline_name)
    for executions in steps.values():
        finished = [e for e in executions if state_names[e.last_known_state] in _FINISHED]
        running = [e for e in executions if state_names[e.last_known_state] not in _FINISHED]
        latest = [max(finished, key=lambda e: e.id)] if finished else []
        held = latest + running
        events = store.get_events_by_execution_ids([e.id for e in held]) if held else []
        keep_ids.update(event.artifact_id for event in events)
    removals = []
    marked = metadata_store_pb2.Artifact.MARKED_FOR_DELETION
    for artifact in store.get_artifacts():
        uri = artifact.uri.rstrip("/")
        if not uri or not _under(uri, pipeline_root):
            continue
        if artifact.state == metadata_store_pb2.Artifact.DELETED:
            continue
        if artifact.state != marked and (artifact.id in keep_ids or uri in keep):
            continue
        reason = (
            "marked by a collection that did not finish"
            if artifact.state == marked
            else f"{posixpath.basename(posixpath.dirname(posixpath.dirname(uri)))} output "
            "of an earlier run, outside the window and TFX's cache"
        )
        removals.append(Removal(uri, reason, artifact_id=artifact.id))
    removals += _leftovers(steps, pipeline_root, keep_stop_reports)
    return Plan(tuple(removals), tuple(kept))


def _steps(store, pipeline_name: str) -> dict[str, list]:
    """Each step of `pipeline_name` (its node id) with its executions, read once."""
    prefix = f"{pipeline_name}."
    return {
        context.name[len(prefix) :]: store.get_executions_by_context(context.id)
        for context in store.get_contexts_by_type("node")
        if context.name.startswith(prefix)
    }


def cancel_abandoned(
    metadata_path: str, pipeline_name: str, live_runs: Collection[str], dry_run: bool = False
) -> list[str]:
    """Marks CANCELED every execution of `pipeline_name` that a run which is no longer
    alive (run_markers.live) left unfinished, so that its outputs are collected like any
    failed step's; returns one line naming each (what `dry_run` would mark)."""
    from ml_metadata import errors
    from ml_metadata.proto import metadata_store_pb2

    store = _store(metadata_path)
    state_names = _state_names()
    lines, abandoned = [], []
    try:
        run_type = store.get_context_type("pipeline_run").id
    except errors.NotFoundError:
        return []  # no run has ever been recorded
    for step, executions in _steps(store, pipeline_name).items():
        for execution in executions:
            if state_names[execution.last_known_state] in _FINISHED:
                continue
            runs = [
                c.name
                for c in store.get_contexts_by_execution(execution.id)
                if c.type_id == run_type
            ]
            if not runs or any(run in live_runs for run in runs):
                continue  # a run still working, or one no marker can speak for
            lines.append(
                f"{step} of run {runs[0]} was left "
                f"{state_names[execution.last_known_state]} by a run that was killed: "
                + ("would mark it CANCELED" if dry_run else "marked CANCELED")
            )
            execution.last_known_state = metadata_store_pb2.Execution.CANCELED
            abandoned.append(execution)
    if abandoned and not dry_run:
        store.put_executions(abandoned)
    return lines


def apply_pipeline_root(plan: Plan, metadata_path: str) -> list[str]:
    """Marks, deletes, then marks deleted; returns one line per failure."""
    from ml_metadata.proto import metadata_store_pb2

    from imgpipe.components.common.storage import fileio

    store = _store(metadata_path)
    by_id = {r.artifact_id: r for r in plan.removals if r.artifact_id is not None}
    artifacts = store.get_artifacts_by_id(list(by_id)) if by_id else []
    for artifact in artifacts:
        artifact.state = metadata_store_pb2.Artifact.MARKED_FOR_DELETION
    if artifacts:
        store.put_artifacts(artifacts)
    problems, done = [], []
    for artifact in artifacts:
        removal = by_id[artifact.id]
        try:
            fileio.remove(removal.path)
        except OSError as e:
            problems.append(f"{removal.path}: not deleted ({e})")
            continue
        artifact.state = metadata_store_pb2.Artifact.DELETED
        done.append(artifact)
    if done:
        store.put_artifacts(done)
    return problems


def _leftovers(steps: dict[str, list], pipeline_root: str, keep_stop_reports: int) -> list[Removal]:
    """What no artifact row names: TFX's records of the executions of every step that has
    none running, and the reports of stopped runs (ImageStatistics' `<uri>.rejected`)
    but the newest `keep_stop_reports`, newest by execution."""
    from imgpipe.components.common.formats import layout
    from imgpipe.components.common.storage import fileio

    state_names = _state_names()
    removals: list[Removal] = []
    reports: list[tuple[int, str]] = []
    for step, executions in steps.items():
        step_dir = posixpath.join(pipeline_root, step)
        if all(state_names[e.last_known_state] in _FINISHED for e in executions):
            for kind in _TFX_EXECUTION_RECORDS:
                folder = posixpath.join(step_dir, _TFX_SYSTEM_DIR, kind)
                if entries := fileio.list_dir(folder):
                    removals.append(
                        Removal(folder, f"TFX's records of finished executions ({len(entries)})")
                    )
        for key in fileio.list_dir(step_dir):
            if key == _TFX_SYSTEM_DIR:
                continue
            for name in fileio.list_dir(posixpath.join(step_dir, key)):
                execution = name.removesuffix(layout.REJECTED_SUFFIX)
                if execution != name and execution.isdigit():
                    reports.append((int(execution), posixpath.join(step_dir, key, name)))
    reports.sort(reverse=True)
    for _, path in reports[keep_stop_reports:]:
        removals.append(
            Removal(path, f"the report of a stopped run, older than the {keep_stop_reports} newest")
        )
    return removals


def _state_names() -> dict[int, str]:
    """MLMD's execution states by number."""
    from ml_metadata.proto import metadata_store_pb2

    return {number: name for name, number in metadata_store_pb2.Execution.State.items()}
