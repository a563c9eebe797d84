"""One collection of what a recurring run no longer needs (pipelines/retention.py): the end
of every local run, the end of every Kubeflow run (its Pusher's step), and `imgpipe gc`."""

from __future__ import annotations

import dataclasses
import os
import time

from imgpipe.pipelines import retention, retention_mlmd, retention_runs, run_markers
from imgpipe.pipelines.config import PipelineConfig


@dataclasses.dataclass(frozen=True)
class Scope:
    """Where a collection looks, and what it keeps.

    Attributes:
      serving_dir: the serving folder ("" for none).
      retention: what stays.
      trainer_spans: the window's spans (0: every span).
      metadata_path: the local runs' metadata store ("" on Kubeflow).
      pipeline_root: the pipeline root (on Kubeflow, where its runs record their folders).
      pipeline_name: the local runs' pipeline.
      this_run_folder: on Kubeflow, the collecting run's own folder, which stays.
    """

    serving_dir: str
    retention: retention.RetentionConfig
    trainer_spans: int
    metadata_path: str = ""
    pipeline_root: str = ""
    pipeline_name: str = ""
    this_run_folder: str = ""

    @classmethod
    def of(cls, config: PipelineConfig) -> Scope:
        return cls(
            serving_dir=config.serving_dir,
            retention=config.retention,
            trainer_spans=config.trainer.spans,
            metadata_path=config.local_metadata_path,
            pipeline_root=config.pipeline_root,
            pipeline_name=config.pipeline_name,
        )

    @property
    def has_metadata(self) -> bool:
        return bool(self.metadata_path) and os.path.exists(self.metadata_path)


@dataclasses.dataclass(frozen=True)
class Collected:
    """What one collection did (or, dry, would do).

    Attributes:
      plan: what goes and what stays, with the reasons.
      problems: one line per thing that could not be deleted.
      skipped: why nothing was collected ("" when it ran).
      dry_run: nothing was deleted.
      abandoned: one line per step a killed run left unfinished in MLMD, now (or, dry,
        to be) marked CANCELED (retention_mlmd.cancel_abandoned).
    """

    plan: retention.Plan
    problems: tuple[str, ...] = ()
    skipped: str = ""
    dry_run: bool = False
    abandoned: tuple[str, ...] = ()

    def summary(self) -> str:
        """One line for the run summary."""
        if self.skipped:
            return f"skipped: {self.skipped}"
        verb = "would delete" if self.dry_run else "deleted"
        text = f"{verb} {len(self.plan.removals)} item(s)"
        if self.problems:
            text += f"; {len(self.problems)} not deleted: {self.problems[0]}"
        if self.abandoned:
            text += "; " + "; ".join(self.abandoned)
        return text


def collect(
    config: PipelineConfig | Scope,
    dry_run: bool = False,
    owner: str = "imgpipe gc",
    strict: bool = True,
) -> Collected:
    """Plans and (unless `dry_run`) deletes, holding the serving folder's lease.

    Args:
      config: the run's config (its folders, `trainer.spans` and `retention`), or the
        Scope a Kubeflow step builds.
      dry_run: plan only.
      owner: who takes the lease, for a run waiting for it.
      strict: refuse a serving folder that is not one; else leave it alone (the end of
        a run that pushed nothing yet).

    Raises:
      retention.NotAServingFolder: (strict) serving_dir holds none of what a Pusher writes.
    """
    from imgpipe.components.common.storage import fileio, serving_lock

    scope = config if isinstance(config, Scope) else Scope.of(config)
    serving_dir = scope.serving_dir
    serving_there = bool(serving_dir) and fileio.isdir(serving_dir)
    if serving_there and strict:
        retention.check_serving_folder(serving_dir)  # before its lease is written there
    elif serving_there:
        serving_there = retention.is_serving_folder(serving_dir)
    lease = None
    if serving_there and not dry_run:
        # Taken before planning, without waiting: what another run holds is planned by
        # nobody, and a collection can always wait for the next run.
        lease = serving_lock.try_acquire(serving_dir, owner)
    if serving_there and lease is None:
        held = serving_lock.current(serving_dir)
        if not dry_run or (held is not None and not serving_lock.gone(held)):
            holder = held.owner if held is not None else "a run that just finished"
            return Collected(
                retention.Plan(), skipped=f"another run ({holder}) holds {serving_dir}"
            )
    try:
        abandoned: tuple[str, ...] = ()
        if scope.has_metadata:
            abandoned = tuple(
                retention_mlmd.cancel_abandoned(
                    scope.metadata_path,
                    scope.pipeline_name,
                    run_markers.live(scope.metadata_path),
                    dry_run,
                )
            )
        plan = _plan(scope, serving_dir if serving_there else "")
        if dry_run or not plan.removals:
            return Collected(plan, dry_run=dry_run, abandoned=abandoned)
        # Serving records first: a span's record goes before its Examples.
        problems = retention.apply_serving(
            retention.Plan(tuple(r for r in plan.removals if r.artifact_id is None))
        )
        if scope.has_metadata:
            problems += retention_mlmd.apply_pipeline_root(plan, scope.metadata_path)
    finally:
        if lease is not None:
            serving_lock.release(serving_dir, lease.token)
    return Collected(plan, tuple(problems), abandoned=abandoned)


def _plan(scope: Scope, serving_dir: str) -> retention.Plan:
    """What goes and what stays; `serving_dir` is "" when there is no serving folder."""
    plan = retention.Plan()
    if serving_dir:
        plan += retention.serving_plan(serving_dir, scope.retention, scope.trainer_spans)
    window = retention.window_spans(serving_dir, scope.trainer_spans, scope.retention.spare_spans)
    kept_examples = [s.examples_uri for s in window]
    if scope.has_metadata:
        plan += retention_mlmd.pipeline_root_plan(
            scope.metadata_path,
            scope.pipeline_root,
            scope.pipeline_name,
            kept_examples,
            scope.retention.keep_stop_reports,
        )
    if scope.pipeline_root:
        plan += retention_runs.run_folders_plan(
            scope.pipeline_root,
            kept_examples,
            scope.retention.kubeflow_run_hours,
            time.time(),
            scope.this_run_folder,
        )
    return plan
