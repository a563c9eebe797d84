"""Retention: what a recurring run no longer needs goes, at the end of every run (local, or
on Kubeflow its Pusher's step) and by `imgpipe gc`, so the disk of a year of daily runs
stays flat. On Kubeflow the pipeline root's half is retention_runs.py.

What stays:
- in the serving folder, the served version (what models.config names), and the
  `keep_pushes` newest other complete versions (the rollback's choices); the admitted-span
  records of the window's reach (the newest `trainer.spans` admitted spans, plus
  `spare_spans` to refill the window when one of them cannot be read), and the
  acceptances measured against a version that is kept;
- in the pipeline root, the outputs and inputs of each step's latest execution (TFX's
  cache for the span just run), everything of an execution still running (another run),
  and the Examples of the spans whose records stay. A served version holds its model, so
  a Trainer's or Pusher's copy of an older run goes. The reports of the newest
  `keep_stop_reports` stopped runs stay; TFX's own records of finished executions (the
  empty folders its launcher leaves under `<step>/.system/`, one or two a run) go.

What goes is deleted so that a crash at any moment leaves a state every reader takes:
- a version loses its PUSH_COMPLETE first (from then on it is an interrupted push, which
  no reader reads and the next push clears), then its files;
- an artifact is marked MARKED_FOR_DELETION in MLMD first (TFX's cache never hands out an
  artifact that is not LIVE: it runs the step again), then its folder goes, then it is
  marked DELETED; its rows stay, so lineage stays readable. The next collection finishes
  what a killed one began;
- an admitted-span record goes before its Examples, so no record ever points at data
  that is gone.

Nothing is deleted while another run holds the serving folder's lease (serving_lock).
"""

from __future__ import annotations

import dataclasses
import posixpath
import time
from collections.abc import Iterable, Sequence
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from imgpipe.components.common.formats.spans import AdmittedSpan

# The config loads with PipelineConfig, which loads no TensorFlow: the file seam (and
# TensorFlow with it) is imported by the functions that read and delete.

# A probe or staging folder younger than this may belong to a run starting now.
LEFTOVER_AGE_S = 3600.0


@dataclasses.dataclass(frozen=True)
class RetentionConfig:
    """What a recurring run keeps (docs/retraining.md, "Retention").

    Attributes:
      enabled: collect at the end of every local run.
      keep_pushes: complete versions kept besides the served one, newest first: what
        `imgpipe rollback` can go back to.
      spare_spans: admitted spans kept beyond the window's `trainer.spans`, so a window
        whose span cannot be read refills from an older one.
      kubeflow_run_hours: on Kubeflow, a run folder younger than this stays whole: its
        run may still be going (retention_runs.py). Longer than a run can last.
      keep_stop_reports: the statistics and report of the newest runs a gate stopped
        (`<statistics>.rejected/`, the path their error gives), kept for whoever is paged.
    """

    enabled: bool = True
    keep_pushes: int = 3
    spare_spans: int = 2
    kubeflow_run_hours: float = 48.0
    keep_stop_reports: int = 3

    def validate(self) -> None:
        """Raises ValueError naming the first bad setting."""
        if self.keep_pushes < 0:
            raise ValueError(f"keep_pushes must be 0 or more, got {self.keep_pushes}")
        if self.spare_spans < 0:
            raise ValueError(f"spare_spans must be 0 or more, got {self.spare_spans}")
        if self.keep_stop_reports < 0:
            raise ValueError(f"keep_stop_reports must be 0 or more, got {self.keep_stop_reports}")
        if self.kubeflow_run_hours < 0:
            raise ValueError(f"kubeflow_run_hours must be 0 or more, got {self.kubeflow_run_hours}")


@dataclasses.dataclass(frozen=True)
class Removal:
    """One thing to delete, and why.

    Attributes:
      path: the file or folder.
      reason: a few words for `imgpipe gc --dry-run` and the run summary.
      artifact_id: its MLMD artifact, marked as it goes (pipeline root only).
      version: the serving version it is (serving folder only): PUSH_COMPLETE goes first.
    """

    path: str
    reason: str
    artifact_id: int | None = None
    version: int | None = None


@dataclasses.dataclass(frozen=True)
class Plan:
    """What a collection deletes and what it keeps, with the reasons."""

    removals: tuple[Removal, ...] = ()
    kept: tuple[str, ...] = ()

    def __add__(self, other: Plan) -> Plan:
        return Plan(self.removals + other.removals, self.kept + other.kept)


class NotAServingFolder(ValueError):
    """gc was pointed at a folder it does not recognise."""


def is_serving_folder(serving_dir: str) -> bool:
    """A folder a Pusher wrote: a model config file, a complete version or a span record."""
    from imgpipe.components.common.formats import model_config, served_models, spans
    from imgpipe.components.common.storage import fileio, serving_lock

    if not fileio.isdir(serving_dir):
        return False
    names = set(fileio.list_dir(serving_dir))
    return bool(
        names & {model_config.MODEL_CONFIG_FILE, spans.SPANS_DIR, serving_lock.LOCK_FILE}
        or served_models.complete_versions(serving_dir)
    )


def check_serving_folder(serving_dir: str) -> None:
    """Raises NotAServingFolder, naming the fix, unless a Pusher wrote `serving_dir`."""
    from imgpipe.components.common.formats import model_config

    if not is_serving_folder(serving_dir):
        raise NotAServingFolder(
            f"{serving_dir} is not a serving folder (no {model_config.MODEL_CONFIG_FILE}, no "
            "pushed version, no span record); give the folder the Pusher pushes to (serving_dir)"
        )


def window_spans(serving_dir: str, trainer_spans: int, spare_spans: int) -> list[AdmittedSpan]:
    """The admitted spans whose records and Examples stay, newest first: all of them when
    the window is every span (`trainer.spans` 0)."""
    from imgpipe.components.common.formats import spans

    admitted = spans.admitted(serving_dir)
    if trainer_spans <= 0:
        return admitted
    return admitted[: trainer_spans + spare_spans]


def serving_plan(
    serving_dir: str, config: RetentionConfig, trainer_spans: int, now: float | None = None
) -> Plan:
    """What goes from the serving folder.

    Raises:
      NotAServingFolder: the folder holds none of what a Pusher writes.
    """
    from imgpipe.components.common.formats import model_config, record_holder, served_models

    check_serving_folder(serving_dir)
    now = time.time() if now is None else now
    removals: list[Removal] = []
    kept: list[str] = []
    versions = served_models.complete_versions(serving_dir)
    served = model_config.served_version(serving_dir)
    if served not in versions:
        served = versions[0] if versions else None
    keep: set[int] = {served} if served is not None else set()
    if served is not None:
        kept.append(f"{posixpath.join(serving_dir, str(served))}: served")
    holder, _ = record_holder.read(serving_dir)
    if holder is not None and holder.model_version in versions:
        keep.add(holder.model_version)
        kept.append(f"{posixpath.join(serving_dir, str(holder.model_version))}: record holder")
    for version in [v for v in versions if v != served][: config.keep_pushes]:
        keep.add(version)
        kept.append(f"{posixpath.join(serving_dir, str(version))}: kept for a rollback")
    for version in reversed(versions):  # oldest first
        if version not in keep:
            removals.append(
                Removal(
                    posixpath.join(serving_dir, str(version)),
                    f"older than the {config.keep_pushes} pushes kept for a rollback",
                    version=version,
                )
            )
    removals.extend(_leftovers(serving_dir, versions, now))
    removals.extend(_span_records(serving_dir, trainer_spans, config.spare_spans, kept))
    removals.extend(_acceptances(serving_dir, keep))
    return Plan(tuple(removals), tuple(kept))


def _leftovers(serving_dir: str, versions: Sequence[int], now: float) -> Iterable[Removal]:
    """Interrupted pushes and killed writability probes, when old enough to be no run's."""
    from imgpipe.components.common.formats.served_models import STAGING_PREFIX
    from imgpipe.components.common.storage import fileio
    from imgpipe.components.common.storage.serving_lock import PROBE_PREFIX

    for name in sorted(fileio.list_dir(serving_dir)):
        path = posixpath.join(serving_dir, name)
        if name.isdigit() and int(name) not in versions:
            yield Removal(path, "an interrupted push (no PUSH_COMPLETE)")
        elif name.startswith((STAGING_PREFIX, PROBE_PREFIX)):
            if now - _modified(path, now) >= LEFTOVER_AGE_S:
                yield Removal(path, "left by a killed run")


def _modified(path: str, default: float) -> float:
    """Seconds since the epoch; `default` where the store gives no time (a folder)."""
    from imgpipe.components.common.storage import fileio

    try:
        nanoseconds = fileio.stat(path).mtime_nsec
    except OSError:
        return default
    return nanoseconds / 1e9 if nanoseconds else default


def _span_records(
    serving_dir: str, trainer_spans: int, spare_spans: int, kept: list[str]
) -> Iterable[Removal]:
    from imgpipe.components.common.formats import spans

    reach = {s.span for s in window_spans(serving_dir, trainer_spans, spare_spans)}
    if reach:
        kept.append(f"span records {', '.join(str(s) for s in sorted(reach))}: the window")
    for admitted in spans.admitted(serving_dir):
        if admitted.span not in reach:
            yield Removal(
                spans.record_path(serving_dir, admitted.span),
                f"span {admitted.span} is past the window's reach",
            )


def _acceptances(serving_dir: str, kept_versions: set[int]) -> Iterable[Removal]:
    from imgpipe.components.common.formats import acceptances
    from imgpipe.components.common.storage import fileio

    folder = acceptances.folder(serving_dir)
    if not fileio.isdir(folder):
        return
    for name in sorted(fileio.list_dir(folder)):
        version = name.split("-", 1)[0]
        if version.isdigit() and int(version) not in kept_versions:
            yield Removal(
                posixpath.join(folder, name),
                f"an acceptance measured against version {version}, which is gone",
            )


def apply_serving(plan: Plan) -> list[str]:
    """Deletes the plan's serving-folder removals; returns one line per failure."""
    from imgpipe.components.common.formats import served_models
    from imgpipe.components.common.storage import fileio

    problems = []
    for removal in plan.removals:
        try:
            if removal.version is not None:  # no reader takes it from here on
                fileio.remove(posixpath.join(removal.path, served_models.PUSH_COMPLETE_FILE))
            fileio.remove(removal.path)
        except OSError as e:
            problems.append(f"{removal.path}: not deleted ({e})")
    return problems
