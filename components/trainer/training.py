"""One training on any strategy: the classifier built (warm-started when asked),
resumed from a preemption backup if there is one, fitted phase by phase, exported, and
published into the model artifact with its label audit.

The Trainer's process trains with `train_here` (trainer.workers=1: a strategy over this
machine's devices, devices.py); each worker of a training on several workers calls
`fit_model` with its MultiWorkerMirroredStrategy and its share of the data
(several_workers/job.py). What a training reads beside its config is `Sources`, which
task.py prepares once.
"""

from __future__ import annotations

import contextlib
import dataclasses
import math
import os
import tempfile
from collections.abc import Callable
from typing import Any

import keras
import tensorflow as tf
from absl import logging

from imgpipe.components.common.formats import champion as champion_lib
from imgpipe.components.common.formats import image_stats, layout, served_models
from imgpipe.components.common.formats.serving import ExamplesScorer
from imgpipe.components.common.images import model_input
from imgpipe.components.common.storage import outputs, staging
from imgpipe.components.trainer import (
    candidate_audit,
    datasets,
    devices,
    export,
    fitting,
    resume,
    warm_start,
)
from imgpipe.components.trainer import input as input_lib
from imgpipe.components.trainer import model as model_lib
from imgpipe.components.trainer import summary as summary_lib
from imgpipe.components.trainer import window as window_lib
from imgpipe.components.trainer.config import TrainerConfig


def examples_uri_and_split(file_pattern: str) -> tuple[str, str]:
    """(examples URI, split) from a TFX file pattern like <uri>/Split-train/*."""
    split_dir = os.path.dirname(file_pattern.rstrip("/"))
    name = os.path.basename(split_dir)
    if not name.startswith(layout.SPLIT_DIR_PREFIX):
        raise ValueError(f"{file_pattern} is not an <examples>/Split-<name>/* pattern")
    return os.path.dirname(split_dir), name[len(layout.SPLIT_DIR_PREFIX) :]


@dataclasses.dataclass(frozen=True)
class Sources:
    """What training reads beside its config: the splits (train from the window of
    spans), the statistics artifact, the resolved champion (for a warm start), where its
    backups go, and the window."""

    train: input_lib.SplitSource
    eval: input_lib.SplitSource
    statistics_uri: str | None
    champion: champion_lib.Resolved | None
    backups: tuple[str, str]  # this training's backup folder, and its fingerprint
    window: window_lib.Window
    training_digest: str  # resume.training_digest: what the model is trained on


@dataclasses.dataclass(frozen=True)
class Trained:
    """A trained model, with its run summary (the label audit not yet in it) and the
    record of what it was trained on (served_models.TRAINING_FILE)."""

    model: keras.Model
    summary: summary_lib.TrainingSummary
    training: dict[str, Any]


def staged(
    source: input_lib.SplitSource, split: str, stack: contextlib.ExitStack
) -> input_lib.SplitSource:
    """`source`, its object-store shards copied to a local folder that `stack` removes."""
    if not staging.needs_staging(source.files):
        return source
    folder = stack.enter_context(tempfile.TemporaryDirectory(prefix="imgpipe-shards-"))
    return dataclasses.replace(
        source, files=staging.stage_files(source.files, os.path.join(folder, split), source.name)
    )


def train_here(
    fn_args,
    config: TrainerConfig,
    labels: list[str],
    sources: Sources,
    inputs: model_input.ModelInput,
) -> None:
    """Trains in this process, over this machine's devices (devices.plan_devices), then
    publishes the serving model, writes the run summary and removes the backups."""
    plan = devices.plan_devices(
        *devices.visible_devices(), num_gpus=config.num_gpus, mixed_precision=config.mixed_precision
    )
    devices.log_plan(plan)
    devices.apply_precision(plan)
    try:
        _train_and_export(fn_args, config, plan, labels, sources, inputs)
    finally:
        keras.mixed_precision.set_global_policy(devices.FLOAT32)


def _train_and_export(
    fn_args,
    config: TrainerConfig,
    plan: devices.DevicePlan,
    labels: list[str],
    sources: Sources,
    inputs: model_input.ModelInput,
) -> None:
    trained = fit_model(
        fn_args, config, (plan, devices.make_strategy(plan)), labels, sources, inputs
    )
    audit = publish(
        fn_args,
        config,
        labels,
        lambda folder: export_trained(
            trained, folder, config, labels, inputs, sources.statistics_uri
        ),
    )
    summary_lib.write(
        fn_args.model_run_dir, dataclasses.replace(trained.summary, label_audit=audit)
    )
    resume.remove(sources.backups[0])
    logging.info("Exported %s", fn_args.serving_model_dir)


def plan_phases(
    config: TrainerConfig, epochs: int, warm: warm_start.WarmStart
) -> list[summary_lib.Phase]:
    """The fit() calls: with a pretrained backbone and a fresh head, `head` first on a
    frozen backbone, then `full` at the fine-tuning rate; from scratch, `full` alone."""
    pretrained = bool(config.weights) or warm.backbone_trained
    rate = config.learning_rate * (config.fine_tune_rate if pretrained else 1.0)
    head_epochs = (
        min(config.frozen_epochs, epochs - 1) if pretrained and not warm.head_trained else 0
    )
    phases = []
    if head_epochs > 0:
        phases.append(summary_lib.Phase("head", head_epochs, config.learning_rate, False))
    phases.append(summary_lib.Phase("full", epochs - head_epochs, rate, True))
    return phases


def fit_model(
    fn_args,
    config: TrainerConfig,
    placement: tuple[devices.DevicePlan, tf.distribute.Strategy],
    labels: list[str],
    sources: Sources,
    inputs: model_input.ModelInput,
    worker: tuple[int, int] = (1, 0),
) -> Trained:
    """Builds the model, resumes from a backup if there is one, and trains it.

    Args:
      placement: the device plan, and the strategy that carries it out.
      worker: (workers, this worker's index) of a training on several workers, which
        each read their share of the data; only worker 0 publishes backups and writes
        TensorBoard's sample images.
    """
    plan, strategy = placement
    chief = worker[1] == 0
    global_batch = config.batch_size * plan.replicas
    steps_per_epoch, epochs = _schedule(
        fn_args.train_steps,
        sources.train.records or 0,
        global_batch,
        config.epochs,
        config.min_train_steps,
    )
    model, warm = _build(config, labels, strategy, sources, inputs, steps_per_epoch * epochs)
    phases = plan_phases(config, epochs, warm)
    folder, fingerprint = sources.backups
    base = _backup_base(fingerprint, steps_per_epoch, global_batch, phases)
    found, best_weights = fitting.start_from(
        model, strategy, config, phases, resume.find(folder, fingerprint, base.plan)
    )
    base = dataclasses.replace(base, data_seed=resume.data_seed(config.seed, found.state))
    run = _run(
        fn_args, config, model, strategy, sources, global_batch, inputs, base.data_seed, worker
    )
    progress = fitting.fit_phases(
        run,
        phases,
        (folder, base),
        (found.state, best_weights),
        lambda log_dir, stopping, backup: _callbacks(config, log_dir, stopping, backup),
        datasets.sample_callbacks(config, sources.train, fn_args.model_run_dir, inputs)
        if chief
        else [],
    )
    training = {
        "digest": sources.training_digest,
        "spans": [s for s in sources.window.spans if s is not None],
        served_models.ACCEPTED_SPANS_KEY: list(sources.window.accepted),
        "backbone": config.backbone,
        "image_size": config.input_size,
        "weights": config.weights or "none (from scratch)",
        "warm_start": warm.status,
        "epochs": sum(p.epochs for p in phases),
        "steps_per_epoch": steps_per_epoch,
        "global_batch": global_batch,
        "workers": plan.workers,
    }
    summary = _training_summary(
        config, sources, warm, (phases, progress), found, plan, (steps_per_epoch, global_batch)
    )
    return Trained(model, summary, training)


def _backup_base(
    fingerprint: str, steps_per_epoch: int, global_batch: int, phases: list[summary_lib.Phase]
) -> resume.BackupState:
    """The backup state before any phase ran: what a backup must match to be resumed."""
    return resume.BackupState(
        fingerprint,
        resume.Plan(
            steps_per_epoch,
            global_batch,
            tuple(resume.PlannedPhase(p.name, p.epochs) for p in phases),
        ),
        phase=0,
        optimizer_steps=0,
        progress=(),
    )


def _training_summary(
    config: TrainerConfig,
    sources: Sources,
    warm: warm_start.WarmStart,
    phases_run: tuple[list[summary_lib.Phase], list[resume.PhaseProgress]],
    found: resume.Found,
    plan: devices.DevicePlan,
    batches: tuple[int, int],
) -> summary_lib.TrainingSummary:
    """The training's summary from its phases as planned and run (phases_run), the
    backup it resumed from and its (steps per epoch, global batch)."""
    phases, progress = phases_run
    steps_per_epoch, global_batch = batches
    accuracies = [p.val_accuracy for p in progress if p.val_accuracy is not None]
    return summary_lib.TrainingSummary(
        backbone=config.backbone,
        image_size=config.input_size,
        weights=config.weights,
        warm_start=warm.status,
        warm_start_note=warm.note,
        steps_per_epoch=steps_per_epoch,
        phases=resume.summary_phases(phases, progress),
        val_accuracy=accuracies[-1] if accuracies else None,
        resume=found.resumption(),
        window=window_lib.describe(sources.window),
        distribution=summary_lib.Distribution(
            plan.strategy,
            plan.workers,
            plan.replicas,
            global_batch,
            devices.all_reduce(plan),
        ),
    )


def _build(
    config: TrainerConfig,
    labels: list[str],
    strategy: tf.distribute.Strategy,
    sources: Sources,
    inputs: model_input.ModelInput,
    total_steps: int,
) -> tuple[keras.Model, warm_start.WarmStart]:
    """The classifier, warm-started when asked, batch norm fitted to the run's length."""
    with strategy.scope():
        model = model_lib.build_model(config, len(labels), inputs)
        warm = warm_start.apply(model, config, labels, sources.champion, inputs)
        lowered = model_lib.fit_batch_norm_to_run(model, total_steps)
        if lowered:
            logging.info(
                "Batch norm momentum lowered to %.4f in %d layers for a run of %d steps",
                model_lib.batch_norm_momentum(total_steps),
                lowered,
                total_steps,
            )
    return model, warm


def _run(
    fn_args,
    config: TrainerConfig,
    model: keras.Model,
    strategy: tf.distribute.Strategy,
    sources: Sources,
    global_batch: int,
    inputs: model_input.ModelInput,
    seed: int,
    worker: tuple[int, int] = (1, 0),
) -> fitting.Run:
    """The input pipelines (of this worker's share), with what fit() needs beside them."""
    eval_steps = fn_args.eval_steps or None
    train_ds, eval_ds = datasets.make_datasets(
        config, (sources.train, sources.eval), global_batch, inputs, eval_steps, seed, worker
    )
    return fitting.Run(
        model,
        strategy,
        config,
        sources.train,
        sources.eval,
        train_ds,
        eval_ds,
        eval_steps,
        global_batch,
        fn_args.model_run_dir,
        chief=worker[1] == 0,
    )


def _schedule(
    train_steps: int | None, records: int, global_batch: int, epochs: int, min_steps: int = 0
) -> tuple[int, int]:
    """(steps per epoch, epochs): TrainArgs.num_steps spread over the epochs, or one
    pass over the records per epoch when num_steps is unset, with epochs added until
    there are at least min_steps steps."""
    if train_steps:
        epochs = min(epochs, train_steps)
        return math.ceil(train_steps / epochs), epochs
    if records < global_batch:
        raise ValueError(
            f"{records} training records cannot fill one batch of "
            f"{global_batch}; set trainer.batch_size lower or trainer.train_steps"
        )
    steps_per_epoch = records // global_batch
    needed = math.ceil(min_steps / steps_per_epoch)
    if needed > epochs:
        logging.info(
            "%d epochs of %d steps fall short of min_train_steps %d: training %d epochs",
            epochs,
            steps_per_epoch,
            min_steps,
            needed,
        )
    return steps_per_epoch, max(epochs, needed)


def _callbacks(
    config: TrainerConfig,
    log_dir: str,
    stopping: keras.callbacks.EarlyStopping | None,
    backup: keras.callbacks.Callback,
) -> list[keras.callbacks.Callback]:
    """TensorBoard, early stopping, then the preemption backup, which saves early
    stopping's state of the epoch."""
    callbacks: list[keras.callbacks.Callback] = []
    if datasets.tensorboard_available():
        callbacks.append(keras.callbacks.TensorBoard(log_dir=log_dir, update_freq="epoch"))
    if stopping is not None:
        callbacks.append(stopping)
    callbacks.append(backup)
    return callbacks


def export_trained(
    trained: Trained,
    folder: str,
    config: TrainerConfig,
    labels: list[str],
    inputs: model_input.ModelInput,
    statistics_uri: str | None,
) -> ExamplesScorer:
    """Writes the serving model into `folder` (export.py); returns its serving_examples."""
    return export.export_serving_model(
        trained.model,
        folder,
        labels,
        inputs,
        config.feature_key_map,
        statistics_uri=statistics_uri,
        training=trained.training,
    )


def publish(
    fn_args,
    config: TrainerConfig,
    labels: list[str],
    write: Callable[[str], ExamplesScorer | None],
) -> image_stats.LabelAudit | None:
    """Publishes the serving model, which `write(folder)` writes into a local folder,
    into the model artifact; returns the candidate's label audit on the eval split
    (candidate_audit.py), scored by the export's serving_examples: the function `write`
    returns, else (an export by other processes) loaded from the export.

    TFX's model artifact holds Format-Serving/ (fn_args.serving_model_dir) only. It is
    exported aside, then moved into place, so a retried Trainer never mixes exports, and
    a `write` that fails publishes nothing.
    """
    model_dir, serving_subdir = os.path.split(fn_args.serving_model_dir.rstrip("/"))
    examples_uri, eval_split = examples_uri_and_split(fn_args.eval_files[0])
    audits: list[image_stats.LabelAudit] = []  # the audit of the attempt published

    def export_and_audit(folder: str) -> None:
        with staging.local_folder(folder, "imgpipe-export-") as local:
            score_examples = write(local)
            audits.append(
                candidate_audit.audit_candidate(
                    local,
                    labels,
                    examples_uri,
                    eval_split,
                    config.feature_key_map,
                    score_examples=score_examples,
                )
            )

    outputs.publish_folder(model_dir, serving_subdir, export_and_audit)
    return audits[-1] if audits else None
