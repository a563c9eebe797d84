"""Runs the pipeline on one machine: LocalDagRunner with SQLite MLMD.

A second run on unchanged images is served from TFX's cache: ImageExampleGen's driver
fingerprints the image tree, so unchanged files give the same cache key everywhere
downstream.

Each run gets its own pipeline-run id (TFX's `pipeline_run` context in MLMD, which
LocalDagRunner would otherwise set to the time), and its results are read from that
context's executions only: two runs on one pipeline root never report each other's
model or evaluation.
"""

from __future__ import annotations

import dataclasses
import datetime
import os
import time
import uuid
from collections.abc import Callable
from typing import Any

from absl import logging
from tfx.types import standard_component_specs as keys

from imgpipe.pipelines import component_ids as ids
from imgpipe.pipelines import pipeline as pl
from imgpipe.pipelines import run_markers, tfx_patches
from imgpipe.pipelines.beam_args import local_beam_args
from imgpipe.pipelines.config import PipelineConfig

# announce(step id, "started" | "done" | "failed", seconds or None).
StepAnnouncer = Callable[[str, str, float | None], None]

# Custom properties TFX's Pusher sets on its PushedModel output.
PUSHED = "pushed"
PUSHED_DESTINATION = "pushed_destination"
# The Examples artifact's span property.
SPAN = "span"
# TFX's MLMD context type of one pipeline run (tfx.dsl.compiler.constants).
PIPELINE_RUN_CONTEXT = "pipeline_run"


@dataclasses.dataclass(frozen=True)
class OutputArtifact:
    uri: str
    properties: dict[str, Any]  # custom properties, then the type's (e.g. span)


@dataclasses.dataclass(frozen=True)
class NodeResult:
    """The latest execution of one component: its state and output artifacts by key."""

    state: str
    outputs: dict[str, list[OutputArtifact]]


@dataclasses.dataclass(frozen=True)
class RunResult:
    """Where a local run left its results, from MLMD."""

    metadata_path: str
    nodes: dict[str, NodeResult]
    run_id: str | None = None
    retention: str = ""  # what the collection at the run's end did (collect.Collected)

    def artifact(self, component_id: str, key: str) -> OutputArtifact | None:
        node = self.nodes.get(component_id)
        artifacts = node.outputs.get(key) if node else None
        return artifacts[0] if artifacts else None

    def uri(self, component_id: str, key: str) -> str | None:
        artifact = self.artifact(component_id, key)
        return artifact.uri if artifact else None

    @property
    def all_cached(self) -> bool:
        """Every step that may be cached was (the resolver always runs)."""
        cacheable = [n for i, n in self.nodes.items() if i not in pl.NEVER_CACHED]
        return bool(cacheable) and all(n.state == "CACHED" for n in cacheable)

    @property
    def pushed(self) -> bool:
        """Whether this run pushed a model: its Pusher ran (not from the cache) and
        published."""
        node = self.nodes.get(ids.PUSHER)
        artifact = self.artifact(ids.PUSHER, keys.PUSHED_MODEL_KEY)
        return bool(
            node is not None
            and node.state == "COMPLETE"
            and artifact is not None
            and artifact.properties.get(PUSHED)
        )


def new_run_id() -> str:
    """A pipeline-run id no other run has: the time, as TFX's, and a random suffix."""
    return f"{datetime.datetime.now().isoformat()}-{uuid.uuid4().hex[:8]}"


def run(
    config: PipelineConfig, announce: StepAnnouncer | None = None, run_id: str | None = None
) -> RunResult:
    """Runs the whole pipeline locally and returns where its outputs are.

    Args:
      config: the run's config.
      announce: called as each step starts and ends (tfx_patches.announced_steps).
      run_id: the pipeline-run id to give the run (new_run_id); None makes one.

    Raises:
      RuntimeError: a component failed (TFX's own error is chained).
    """
    from tfx.orchestration import metadata
    from tfx.orchestration.local.local_dag_runner import LocalDagRunner

    from imgpipe.components.common.storage import fileio, object_store
    from imgpipe.pipelines import local_executors

    if not fileio.is_local(config.local_metadata_path):
        raise ValueError(
            f"metadata_path {config.local_metadata_path}: local runs keep TFX's metadata in "
            "SQLite, which needs a local file; set metadata_path to one when pipeline_root "
            "is on an object store"
        )
    fileio.makedirs(os.path.dirname(config.local_metadata_path) or ".")
    connection = metadata.sqlite_metadata_connection_config(config.local_metadata_path)
    pipeline = pl.create_pipeline(
        config,
        metadata_connection_config=connection,
        beam_pipeline_args=local_beam_args(config.beam_args),
    )
    if object_store.is_object_store(config.pipeline_root):
        for component in pipeline.components:
            executor = local_executors.EXECUTORS.get(component.id)
            if executor is not None:
                tfx_patches.swap_executor(component, executor)
    from tfx.dsl.compiler import compiler

    tfx_patches.no_tfx_sdist()
    run_id = run_id or new_run_id()
    ir = compiler.Compiler().compile(pipeline)
    # LocalDagRunner substitutes the time only where no id is set yet.
    tfx_patches.set_pipeline_run_id(ir, run_id)
    for node in ir.nodes:
        # The image folder's fingerprint keeps ImageExampleGen's cache key true; the
        # resolver has no such key.
        if node.pipeline_node.node_info.id == ids.CHAMPION:
            node.pipeline_node.execution_options.caching_options.enable_cache = False
    failed = False
    try:
        with (
            run_markers.running(config.local_metadata_path, run_id),
            tfx_patches.announced_steps(announce or (lambda *_: None)),
        ):
            LocalDagRunner().run_with_ir(ir)
    except Exception:
        failed = True
        raise
    finally:
        release_lease(config, run_id)
        # A failed run collects too: runs that keep failing (a full disk, a data source
        # that keeps tripping a gate) must not keep what every run leaves. Not after a
        # stop (SIGTERM, the deadline), which is bounded to seconds.
        if failed:
            logging.info("retention after the failed run: %s", collect_after(config, run_id))
    result = latest_results(config, run_id)
    return dataclasses.replace(result, retention=collect_after(config, run_id))


def collect_after(config: PipelineConfig, run_id: str) -> str:
    """The collection that ends every run (pipelines/retention.py), as one line; a
    collection that fails is named and never fails the run."""
    if not config.retention.enabled:
        return "off (retention.enabled is false)"
    from imgpipe.pipelines.collect import collect

    try:
        return collect(config, owner=f"retention after {run_id}", strict=False).summary()
    except Exception as e:  # a store's or MLMD's error too: it never fails the run
        return f"failed: {' '.join(str(e).split())[:300]}; run imgpipe gc to retry"


def record_failure(config: PipelineConfig, run_id: str, reason: str) -> None:
    """Records in the serving folder's history (serving_history.py) that run `run_id`
    ended in `reason` (one line) without deciding: the step that failed or was running,
    the span it read, and the version that serves on. A run that keeps failing then shows
    in `imgpipe history`, and as a stall once spans go by. Never raises: the run's own
    error is the one to report."""
    if not config.serving_dir:
        return
    from imgpipe.components.common.formats import champion, serving_history

    step, span, served = None, config.span, None
    try:  # what MLMD knows of the run: nothing when it failed before its first step
        result = latest_results(config, run_id)
        step = next(
            (i for i, node in result.nodes.items() if node.state not in ("COMPLETE", "CACHED")),
            None,
        )
        examples = result.artifact(ids.EXAMPLE_GEN, keys.EXAMPLES_KEY)
        if span is None and examples is not None and examples.properties.get(SPAN) is not None:
            span = int(examples.properties[SPAN])
        resolved = result.uri(ids.CHAMPION, pl.CHAMPION_KEY)  # the run's own lookup
        served = champion.read(resolved).champion_version if resolved else None
    except Exception as e:  # a store's or MLMD's error: the record says what is known
        logging.warning("the failed run's record is written without its details: %s", e)
    reason = serving_history.brief(f"{step} failed: {reason}" if step else reason)
    try:
        # A schedule that keeps failing alike keeps its first record (the failure's
        # start), not one a run: the history stays small, and every run reads it.
        last = serving_history.newest(config.serving_dir)
        if last and (last.kind, last.span, last.reason) == (serving_history.FAILED, span, reason):
            logging.info("the same failure as the history's newest record: not recorded again")
            return
        decision = serving_history.Decision(
            time=time.time(),
            kind=serving_history.FAILED,
            span=span,
            served_version=served,
            reason=reason,
            run_id=run_id,
        )
        serving_history.record(config.serving_dir, decision)
    except Exception as e:  # the run's own error comes first
        logging.warning("the failed run's history record was not written: %s", e)


def release_lease(config: PipelineConfig, run_id: str) -> None:
    """Gives back the serving lease this run still holds: a run whose last step was
    served from the cache, or that stopped at a step that is not ours (StatisticsGen)."""
    from imgpipe.components.common.formats import champion

    champion.release_run_lease(latest_results(config, run_id).uri(ids.CHAMPION, pl.CHAMPION_KEY))


def latest_results(config: PipelineConfig, run_id: str | None = None) -> RunResult:
    """Each component's execution state and outputs, read from the SQLite MLMD: those
    of the run `run_id`, or without it each component's latest."""
    from ml_metadata.metadata_store import metadata_store
    from ml_metadata.proto import metadata_store_pb2
    from tfx.orchestration import metadata

    store = metadata_store.MetadataStore(
        metadata.sqlite_metadata_connection_config(config.local_metadata_path)
    )
    state_names = {v: k for k, v in metadata_store_pb2.Execution.State.items()}
    in_run: set[int] | None = None
    if run_id is not None:
        run_context = store.get_context_by_type_and_name(PIPELINE_RUN_CONTEXT, run_id)
        executions = store.get_executions_by_context(run_context.id) if run_context else []
        in_run = {e.id for e in executions}
    nodes = {}
    for component_id in ids.COMPONENT_IDS:
        context = store.get_context_by_type_and_name(
            "node", f"{config.pipeline_name}.{component_id}"
        )
        if context is None:
            continue
        executions = [
            e
            for e in store.get_executions_by_context(context.id)
            if in_run is None or e.id in in_run
        ]
        if not executions:
            continue
        latest = max(executions, key=lambda e: e.id)
        outputs: dict[str, list[OutputArtifact]] = {}
        events = store.get_events_by_execution_ids([latest.id])
        output_events = [
            e
            for e in events
            if e.type in (metadata_store_pb2.Event.OUTPUT, metadata_store_pb2.Event.DECLARED_OUTPUT)
        ]
        artifacts = {
            a.id: a for a in store.get_artifacts_by_id([e.artifact_id for e in output_events])
        }
        for event in output_events:
            key = event.path.steps[0].key if event.path.steps else ""
            artifact = artifacts[event.artifact_id]
            properties = {
                name: getattr(value, value.WhichOneof("value"))
                for values in (artifact.custom_properties, artifact.properties)
                for name, value in values.items()
                if value.WhichOneof("value")
            }
            outputs.setdefault(key, []).append(OutputArtifact(artifact.uri, properties))
        nodes[component_id] = NodeResult(
            state=state_names[latest.last_known_state], outputs=outputs
        )
    return RunResult(metadata_path=config.local_metadata_path, nodes=nodes, run_id=run_id)
