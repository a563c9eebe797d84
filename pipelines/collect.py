"""One collection of what a recurring run no longer needs (pipelines/retention.py): the end
of every local run, and `imgpipe gc`."""

from __future__ import annotations

import dataclasses
import os

from imgpipe.pipelines import retention, retention_mlmd, run_markers
from imgpipe.pipelines.config import PipelineConfig


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
    config: PipelineConfig, dry_run: bool = False, owner: str = "imgpipe gc", strict: bool = True
) -> Collected:
    """Plans and (unless `dry_run`) deletes, holding the serving folder's lease.

    Args:
      config: the run's config: its folders, `trainer.spans` and `retention`.
      dry_run: plan only.
      owner: who takes the lease, for a run waiting for it.
      strict: refuse a serving folder that is not one; else leave it alone (the end of
        a run that pushed nothing yet).

    Raises:
      retention.NotAServingFolder: (strict) serving_dir holds none of what a Pusher writes.
    """
    from imgpipe.components.common.storage import fileio, serving_lock

    serving_dir = config.serving_dir
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
        if os.path.exists(config.local_metadata_path):
            abandoned = tuple(
                retention_mlmd.cancel_abandoned(
                    config.local_metadata_path,
                    config.pipeline_name,
                    run_markers.live(config.local_metadata_path),
                    dry_run,
                )
            )
        plan = _plan(config, serving_dir if serving_there else "")
        if dry_run or not plan.removals:
            return Collected(plan, dry_run=dry_run, abandoned=abandoned)
        # Serving records first: a span's record goes before its Examples.
        problems = retention.apply_serving(
            retention.Plan(tuple(r for r in plan.removals if r.artifact_id is None))
        )
        if os.path.exists(config.local_metadata_path):
            problems += retention_mlmd.apply_pipeline_root(plan, config.local_metadata_path)
    finally:
        if lease is not None:
            serving_lock.release(serving_dir, lease.token)
    return Collected(plan, tuple(problems), abandoned=abandoned)


def _plan(config: PipelineConfig, serving_dir: str) -> retention.Plan:
    """What goes and what stays; `serving_dir` is "" when there is no serving folder."""
    plan = retention.Plan()
    if serving_dir:
        plan += retention.serving_plan(serving_dir, config.retention, config.trainer.spans)
    window = retention.window_spans(serving_dir, config.trainer.spans, config.retention.spare_spans)
    if os.path.exists(config.local_metadata_path):
        plan += retention_mlmd.pipeline_root_plan(
            config.local_metadata_path,
            config.pipeline_root,
            config.pipeline_name,
            [s.examples_uri for s in window],
        )
    return plan
