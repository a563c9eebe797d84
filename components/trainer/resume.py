"""Where a Trainer's preemption backups live, what they hold, and which one a retry uses.

A retried Trainer is a new execution: LocalDagRunner gives it new output folders, and
Kubeflow the same or new ones. Its backups are therefore kept beside the executions,
under `<checkpoint_dir or <model_run>/../..>/.backups/` (with LocalDagRunner
`<pipeline_root>/Trainer/.backups/`), in a folder named by the fingerprint of what makes
the training the same training: the input artifacts' manifests (their content, not their
URIs), the split names, the settings, the step counts and the warm-start champion.

Each backup is a folder `<phase>-<optimizer steps>/` of the model's weights with the
optimizer's variables, early stopping's best weights, and state.json (the position, the
plan, early stopping's counters), closed by a manifest written last. A backup is
published whole: its files are copied first, the manifest last; only then are the older
ones removed. A retry takes the newest backup with a manifest, if it passes its checks
(manifest, checksums, fingerprint, plan); else it starts afresh and says why.

No TensorFlow here: fitting.py saves and loads the weights.
"""

from __future__ import annotations

import dataclasses
import hashlib
import json
import os
from collections.abc import Mapping, Sequence

from imgpipe.components.common.formats import manifest
from imgpipe.components.common.formats.layout import MANIFEST_FILE
from imgpipe.components.common.runtime import config_loader
from imgpipe.components.common.storage import fileio
from imgpipe.components.trainer import summary as summary_lib
from imgpipe.components.trainer.config import TrainerConfig

BACKUPS_DIR = ".backups"
STATE_FILE = "state.json"
WEIGHTS_FILE = "model.weights.h5"  # the model's variables and the optimizer's
BEST_WEIGHTS_FILE = "best_weights.npz"  # early stopping's best weights, when it has them
SCHEMA_VERSION = 1
FINGERPRINT_CHARS = 16
# The KFP launcher's local copies of object stores (pipelines/container/entrypoint.py):
# an output written below them is uploaded only when the step succeeds, so backups go
# to the store itself.
LAUNCHER_MOUNTS = {"/gcs/": "gs://", "/s3/": "s3://"}
# Settings that say where training keeps its files, what it shows or what kind of
# Kubernetes job runs its workers, not what it learns.
NOT_FINGERPRINTED = ("checkpoint_dir", "tensorboard_images", "backup_every_steps", "launcher")


@dataclasses.dataclass(frozen=True)
class PlannedPhase:
    name: str
    epochs: int


@dataclasses.dataclass(frozen=True)
class Plan:
    """The schedule a backup belongs to; a retry with another one starts afresh."""

    steps_per_epoch: int
    global_batch: int
    phases: tuple[PlannedPhase, ...]


@dataclasses.dataclass(frozen=True)
class PhaseProgress:
    """One begun phase: epochs complete, optimizer steps, best val_accuracy so far."""

    epochs_run: int = 0
    optimizer_steps: int = 0
    val_accuracy: float | None = None


@dataclasses.dataclass(frozen=True)
class EarlyStoppingState:
    """keras.callbacks.EarlyStopping's counters (its best weights are a file beside)."""

    wait: int
    best: float | None
    best_epoch: int
    stopped_epoch: int


@dataclasses.dataclass(frozen=True)
class BackupState:
    """state.json of a backup.

    Attributes:
      fingerprint: the training's fingerprint (see `fingerprint`).
      plan: the schedule.
      phase: index in plan.phases of the phase the backup was taken in.
      optimizer_steps: the optimizer's iterations then, counted within the phase.
      progress: one entry per phase begun, the current one last.
      early_stopping: the current phase's early stopping, if on.
      data_seed: the seed of the shuffles the steps so far were drawn with.
    """

    fingerprint: str
    plan: Plan
    phase: int
    optimizer_steps: int
    progress: tuple[PhaseProgress, ...]
    early_stopping: EarlyStoppingState | None = None
    data_seed: int = 0
    version: int = SCHEMA_VERSION

    def validate(self) -> None:
        if not 0 <= self.phase < len(self.plan.phases):
            raise ValueError(f"phase {self.phase} is not one of the plan's {self.plan.phases}")
        total = self.plan.phases[self.phase].epochs * self.plan.steps_per_epoch
        if not 0 <= self.optimizer_steps <= total:
            raise ValueError(f"optimizer_steps {self.optimizer_steps} is not in [0, {total}]")
        if len(self.progress) != self.phase + 1:
            raise ValueError(f"progress has {len(self.progress)} phases, not {self.phase + 1}")

    @property
    def position(self) -> tuple[int, int]:
        """(epochs complete over all phases, steps into the next epoch)."""
        before = sum(p.epochs for p in self.plan.phases[: self.phase])
        epoch, step = divmod(self.optimizer_steps, self.plan.steps_per_epoch)
        return before + epoch, step


@dataclasses.dataclass(frozen=True)
class Found:
    """What a retry starts from: a backup (state and folder), or nothing, and why."""

    state: BackupState | None
    path: str | None
    note: str

    def resumption(self) -> summary_lib.Resumption:
        if self.state is None:
            return summary_lib.Resumption(summary_lib.FRESH, self.note)
        epoch, step = self.state.position
        return summary_lib.Resumption(
            summary_lib.RESUMED,
            self.note,
            self.state.plan.phases[self.state.phase].name,
            epoch,
            step,
            self.state.optimizer_steps,
        )


@dataclasses.dataclass(frozen=True)
class Segment:
    """One fit() call: epochs [initial_epoch, epochs) of steps_per_epoch steps."""

    initial_epoch: int
    epochs: int
    steps_per_epoch: int


def backups_root(model_run_uri: str, checkpoint_dir: str | None) -> str:
    """The folder that holds every training's backups: `checkpoint_dir`, or `.backups`
    beside the Trainer's executions (`<model_run>/../../.backups`; with LocalDagRunner,
    whose model_run is `<pipeline_root>/Trainer/model_run/<execution>`, that is
    `<pipeline_root>/Trainer/.backups`). Below a KFP launcher mount (LAUNCHER_MOUNTS),
    the store's own URI."""
    if checkpoint_dir:
        return checkpoint_dir.rstrip("/")
    component_dir = os.path.dirname(os.path.dirname(model_run_uri.rstrip("/")))
    for mount, scheme in LAUNCHER_MOUNTS.items():
        if component_dir.startswith(mount):
            component_dir = scheme + component_dir[len(mount) :]
    return os.path.join(component_dir, BACKUPS_DIR)


def _digest(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


def training_digest(
    examples_uri: str,
    splits: tuple[str, str],
    config: TrainerConfig,
    steps: tuple[int | None, int | None],
    window: Sequence[str] = (),
) -> str:
    """What a model is trained on, whatever it starts from: the spans' Examples (by
    their manifests' content), the splits and the settings. Two runs with the same digest
    train the same model again (served_models.TRAINING_DIGEST_FILE)."""
    return fingerprint(examples_uri, splits, None, config, steps, None, window)


def fingerprint(
    examples_uri: str,
    splits: tuple[str, str],
    statistics_uri: str | None,
    config: TrainerConfig,
    steps: tuple[int | None, int | None],
    champion: str | None,
    window: Sequence[str] = (),
) -> str:
    """What makes two Trainer runs the same training, as FINGERPRINT_CHARS hex digits.

    Args:
      examples_uri: the Examples artifact (its manifest is read: its content counts).
      splits: the train and eval split names.
      statistics_uri: the ImageStatistics artifact, if any (its manifest is read).
      config: the resolved TrainerConfig; NOT_FINGERPRINTED settings are left out.
      steps: TFX's train and eval steps.
      champion: the warm start's champion folder, if a warm start is on.
      window: the Examples of the earlier spans trained on too (their manifests are read).
    """
    settings = config_loader.to_dict(config)
    for name in NOT_FINGERPRINTED:
        settings.pop(name, None)
    if settings.get("workers") == 1:
        # One worker, as before the setting existed: earlier fingerprints still hold.
        del settings["workers"]
    inputs = {
        "examples": _digest(fileio.read_bytes(os.path.join(examples_uri, MANIFEST_FILE))),
        "statistics": (
            _digest(fileio.read_bytes(os.path.join(statistics_uri, MANIFEST_FILE)))
            if statistics_uri
            else None
        ),
        **(
            {
                "window": [
                    _digest(fileio.read_bytes(os.path.join(uri, MANIFEST_FILE))) for uri in window
                ]
            }
            if window
            else {}
        ),
        "splits": list(splits),
        "config": settings,
        "steps": list(steps),
        "champion": champion,
    }
    return _digest(json.dumps(inputs, sort_keys=True).encode())[:FINGERPRINT_CHARS]


def backup_name(phase: int, optimizer_steps: int) -> str:
    """The folder name of a backup; names sort in training order."""
    return f"{phase:02d}-{optimizer_steps:010d}"


def publish(folder: str, state: BackupState, local_files: Mapping[str, str]) -> str:
    """Publishes a backup into `folder` (the training's, from `fingerprint`); returns it.

    The files are copied first and the manifest written last, so a backup is complete
    exactly when its manifest exists; the other backups in `folder` are removed after.

    Args:
      folder: `<backups_root>/<fingerprint>`, local or on an object store.
      state: what state.json says.
      local_files: file name -> a local file to copy into the backup.
    """
    target = os.path.join(folder, backup_name(state.phase, state.optimizer_steps))
    fileio.remove(target)  # an unfinished one, of a run killed while writing it
    fileio.makedirs(target)
    state_bytes = config_loader.to_document(state).encode()
    entries = {STATE_FILE: manifest.entry_of(state_bytes)}
    for name, local in local_files.items():
        entries.update(manifest.describe(os.path.dirname(local), [os.path.basename(local)]))
        fileio.copy(local, os.path.join(target, name), overwrite=True)
    fileio.write_atomic(os.path.join(target, STATE_FILE), state_bytes)
    manifest.write(target, dict(sorted(entries.items())))
    for name in fileio.list_dir(folder):
        if name != os.path.basename(target):
            fileio.remove(os.path.join(folder, name))
    return target


def find(folder: str, fingerprint_: str, plan: Plan) -> Found:
    """The backup a retry resumes from: the newest one in `folder` with a manifest, if
    it passes its checks; else none, with the reason.

    Checked: the manifest lists exactly the files there, with their sizes and CRC-32C;
    state.json fits the schema, names this fingerprint and this plan.
    """
    names = sorted(fileio.list_dir(folder), reverse=True)
    complete = [n for n in names if fileio.exists(os.path.join(folder, n, MANIFEST_FILE))]
    if not complete:
        unfinished = f" ({len(names)} unfinished, ignored)" if names else ""
        return Found(None, None, f"no backup in {folder}{unfinished}: training starts afresh")
    path = os.path.join(folder, complete[0])
    try:
        manifest.verify(path, checksums=True)
        state = config_loader.from_document(
            BackupState,
            fileio.read_bytes(os.path.join(path, STATE_FILE)).decode(),
            os.path.join(path, STATE_FILE),
            SCHEMA_VERSION,
        )
        if state.fingerprint != fingerprint_:
            raise ValueError(f"it was taken for fingerprint {state.fingerprint}")
        if state.plan != plan:
            raise ValueError(f"it was taken with another schedule: {state.plan}, now {plan}")
    except (ValueError, OSError, UnicodeDecodeError) as e:
        return Found(None, path, f"the backup {path} fails its check ({e}): training starts afresh")
    epoch, step = state.position
    return Found(
        state,
        path,
        f"resumed from {path}: phase {plan.phases[state.phase].name}, epoch {epoch} "
        f"step {step}, optimizer step {state.optimizer_steps}",
    )


def remove(folder: str) -> None:
    """Removes a training's backups, and the backups root when nothing else is left."""
    fileio.remove(folder)
    root = os.path.dirname(folder.rstrip("/"))
    if os.path.basename(root) == BACKUPS_DIR and not fileio.list_dir(root):
        fileio.remove(root)


def segments(
    optimizer_steps: int, steps_per_epoch: int, first_epoch: int, epochs: int
) -> list[Segment]:
    """The fit() calls that finish a phase from `optimizer_steps` into it: the rest of a
    begun epoch, then the whole epochs left.

    Args:
      optimizer_steps: steps of this phase done (0 when it starts).
      steps_per_epoch: steps of a whole epoch.
      first_epoch: the phase's first epoch, counted over all phases.
      epochs: the phase's epochs.
    """
    done, step = divmod(optimizer_steps, steps_per_epoch)
    parts = []
    if step:
        parts.append(Segment(first_epoch + done, first_epoch + done + 1, steps_per_epoch - step))
        done += 1
    if done < epochs:
        parts.append(Segment(first_epoch + done, first_epoch + epochs, steps_per_epoch))
    return parts


def data_seed(seed: int, state: BackupState | None) -> int:
    """The shuffle seed: the config's for a fresh run; on resuming, one drawn from the
    position, so that the steps after it do not replay the first epoch's order."""
    if state is None:
        return seed
    key = f"{seed}/{state.phase}/{state.optimizer_steps}".encode()
    return int(_digest(key)[:8], 16) & 0x7FFFFFFF


def summary_phases(
    phases: Sequence[summary_lib.Phase], progress: Sequence[PhaseProgress]
) -> tuple[summary_lib.Phase, ...]:
    """The summary's phases: those begun, with their epochs and optimizer steps."""
    return tuple(
        dataclasses.replace(p, epochs_run=done.epochs_run, optimizer_steps=done.optimizer_steps)
        for p, done in zip(phases, progress, strict=False)
    )
