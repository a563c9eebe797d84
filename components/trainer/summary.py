"""training_summary.json in the Trainer's `model_run` artifact: how the model was
trained (backbone, warm start, phases, epochs) and how it ended, for the run summary."""

from __future__ import annotations

import dataclasses
import posixpath

from imgpipe.components.common.formats.image_stats import LabelAudit
from imgpipe.components.common.runtime import config_loader
from imgpipe.components.common.storage import fileio

TRAINING_SUMMARY_FILE = "training_summary.json"
VERSION = 4
# Version 2 added label_audit, version 3 distribution, version 4 not_trained (each with
# a default), so the earlier files still read.
READABLE_VERSIONS = (1, 2, 3, 4)


@dataclasses.dataclass(frozen=True)
class Phase:
    """One fit(): `head` trains the head on a frozen backbone, `full` the whole model."""

    name: str
    epochs: int
    peak_learning_rate: float
    backbone_trainable: bool
    epochs_run: int = 0
    optimizer_steps: int = 0  # the optimizer's iterations when the phase ended


# Resumption.status values.
FRESH = "fresh"
RESUMED = "resumed"


@dataclasses.dataclass(frozen=True)
class Resumption:
    """Whether training resumed from a preemption backup (resume.py), and why (not).

    Attributes:
      status: FRESH or RESUMED.
      note: why: the backup it resumed from, or why none was used.
      phase: RESUMED: the phase the backup was taken in.
      epoch: RESUMED: the epochs complete at the backup, counted over all phases.
      step: RESUMED: the steps into the next epoch.
      optimizer_steps: RESUMED: the optimizer iterations restored (within the phase).
    """

    status: str = FRESH
    note: str = ""
    phase: str | None = None
    epoch: int | None = None
    step: int | None = None
    optimizer_steps: int | None = None


@dataclasses.dataclass(frozen=True)
class Distribution:
    """How training was spread out (devices.py, docs/distributed-training.md).

    Attributes:
      strategy: single, mirrored or multi_worker_mirrored ("" in a summary before it).
      workers: the worker processes that trained together.
      replicas: the replicas in sync over all of them.
      global_batch: images per optimizer step: the per-replica batch x replicas.
      communication: the all-reduce of several workers (RING, NCCL), "" with one.
    """

    strategy: str = ""
    workers: int = 1
    replicas: int = 1
    global_batch: int = 0
    communication: str = ""


@dataclasses.dataclass(frozen=True)
class TrainingSummary:
    backbone: str
    image_size: int
    weights: str | None
    warm_start: str
    warm_start_note: str
    steps_per_epoch: int
    phases: tuple[Phase, ...]
    val_accuracy: float | None = None
    resume: Resumption = Resumption()
    version: int = VERSION
    # The label audit of the eval split by the trained model (candidate_audit.py).
    label_audit: LabelAudit | None = None
    window: str = ""
    distribution: Distribution = Distribution()
    # Why no training ran and the champion's model was published instead (unchanged.py);
    # "" when the model was trained.
    not_trained: str = ""


def write(model_run_uri: str, summary: TrainingSummary) -> None:
    fileio.makedirs(model_run_uri)
    fileio.write_text(
        posixpath.join(model_run_uri, TRAINING_SUMMARY_FILE), config_loader.to_document(summary)
    )


def read_if_present(model_run_uri: str | None) -> TrainingSummary | None:
    if not model_run_uri:
        return None
    path = posixpath.join(model_run_uri, TRAINING_SUMMARY_FILE)
    if not fileio.exists(path):
        return None
    return config_loader.from_document(
        TrainingSummary, fileio.read_bytes(path).decode(), path, READABLE_VERSIONS
    )
