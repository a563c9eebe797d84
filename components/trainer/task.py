"""The TFX Trainer entry point: `run_fn(fn_args)` trains, checkpoints and exports.

Reads the `Examples` artifact (shards, label map, conversion summary) and the
ImageStatistics artifact (mean and std), whose URI the ImageTrainer executor passes as
fn_args.custom_config["image_statistics_uri"].
"""

from __future__ import annotations

import contextlib
import dataclasses
import functools
import math
import os
import tempfile
from collections.abc import Sequence
from typing import Any

import attr
import keras
import tensorflow as tf
from absl import logging

from imgpipe.components.common import (
    allocator,
    artifacts,
    fileio,
    image_stats,
    layout,
    manifest,
    model_input,
    outputs,
    staging,
)
from imgpipe.components.trainer import candidate_audit, devices, export, memory, warm_start
from imgpipe.components.trainer import input as input_lib
from imgpipe.components.trainer import model as model_lib
from imgpipe.components.trainer import summary as summary_lib
from imgpipe.components.trainer.config import (
    CACHE_OFF,
    IMAGE_STATISTICS_URI_KEY,
    SERVING_DIR_KEY,
    TrainerConfig,
    from_custom_config,
)

BACKUP_SUBDIR = "backup"
SAMPLES_SUBDIR = "samples"


def examples_uri_and_split(file_pattern: str) -> tuple[str, str]:
    """(examples URI, split) from a TFX file pattern like <uri>/Split-train/*."""
    split_dir = os.path.dirname(file_pattern.rstrip("/"))
    name = os.path.basename(split_dir)
    if not name.startswith(layout.SPLIT_DIR_PREFIX):
        raise ValueError(f"{file_pattern} is not an <examples>/Split-<name>/* pattern")
    return os.path.dirname(split_dir), name[len(layout.SPLIT_DIR_PREFIX) :]


def resolve_normalization(
    config: TrainerConfig, statistics_uri: str | None, train_split: str = layout.TRAIN_SPLIT
) -> tuple[list[float], list[float], float]:
    """(mean, std, crop_fraction): ImageStatistics' values of the train split, unless the
    config overrides them.

    Raises:
      ValueError: neither a statistics artifact nor mean and std in the config.
      IncompleteOutputError: the statistics artifact is not complete.
    """
    stats: image_stats.Normalization | None = None
    if statistics_uri:
        manifest.verify(statistics_uri)
        try:
            stats = image_stats.read(statistics_uri).normalization(train_split)
        except KeyError as e:
            raise ValueError(f"{statistics_uri}: {e.args[0]}") from None
        if stats.image_size != config.input_size:
            logging.warning(
                "statistics were computed at %d px, the model trains at %d px",
                stats.image_size,
                config.input_size,
            )
    elif config.mean is None or config.std is None:
        raise ValueError(
            "the Trainer needs normalization constants: connect an "
            "ImageStatistics artifact (image_statistics=...) or set trainer "
            "mean and std"
        )
    mean = list(config.mean if config.mean is not None else stats.mean)  # type: ignore[union-attr]
    std = list(config.std if config.std is not None else stats.std)  # type: ignore[union-attr]
    crop = (
        config.crop_fraction
        or (stats.crop_fraction if stats else None)
        or model_input.DEFAULT_CROP_FRACTION
    )
    return mean, std, float(crop)


class SampleImages(keras.callbacks.Callback):
    """Writes a few augmented training images to TensorBoard before training starts."""

    def __init__(
        self,
        log_dir: str,
        images: tf.Tensor,
        normalization: tuple[Sequence[float], Sequence[float]] | None,
    ):
        super().__init__()
        self.log_dir = log_dir
        self.images = images
        self.normalization = normalization

    def on_train_begin(self, logs=None):
        images = tf.cast(self.images, tf.float32)
        if self.normalization is not None:
            mean, std = self.normalization
            images = images * tf.constant(std) + tf.constant(mean)
        images = tf.clip_by_value(images, 0.0, 255.0) / 255.0
        with tf.summary.create_file_writer(self.log_dir).as_default():
            tf.summary.image(
                "augmented_training_images", images, step=0, max_outputs=int(images.shape[0])
            )


def run_fn(fn_args) -> None:
    """Trains the classifier and exports it to fn_args.serving_model_dir.

    Args:
      fn_args: tfx FnArgs: train_files, eval_files, train_steps, eval_steps,
        serving_model_dir, model_run_dir and custom_config (see TrainerConfig).
    """
    custom_config = dict(fn_args.custom_config or {})
    config = from_custom_config(custom_config).resolved()
    examples_uri, train_split = examples_uri_and_split(fn_args.train_files[0])
    _, eval_split = examples_uri_and_split(fn_args.eval_files[0])
    manifest.verify(examples_uri)
    if config.tune_malloc:
        allocator.tune_malloc()
    statistics_uri = custom_config.get(IMAGE_STATISTICS_URI_KEY)
    mean, std, crop_fraction = resolve_normalization(config, statistics_uri, train_split)
    labels = artifacts.load_labels(examples_uri)
    train_source = input_lib.split_source(examples_uri, train_split)
    eval_source = input_lib.split_source(examples_uri, eval_split)
    with contextlib.ExitStack() as stack:
        if staging.needs_staging(train_source.files + eval_source.files):
            shards_dir = stack.enter_context(tempfile.TemporaryDirectory(prefix="imgpipe-shards-"))
            train_source, eval_source = (
                dataclasses.replace(
                    source,
                    files=staging.stage_files(
                        source.files, os.path.join(shards_dir, split), source.name
                    ),
                )
                for source, split in ((train_source, train_split), (eval_source, eval_split))
            )
        run_dir = stack.enter_context(staging.local_folder(fn_args.model_run_dir, "imgpipe-run-"))
        _train(
            attr.evolve(fn_args, model_run_dir=run_dir),
            config,
            custom_config,
            labels,
            (train_source, eval_source),
            statistics_uri,
            (mean, std),
            crop_fraction,
        )


def _train(
    fn_args,
    config: TrainerConfig,
    custom_config: dict[str, Any],
    labels: list[str],
    splits: tuple[input_lib.SplitSource, input_lib.SplitSource],
    statistics_uri: str | None,
    normalization: tuple[list[float], list[float]],
    crop_fraction: float,
) -> None:
    train_source, eval_source = splits
    plan = devices.plan_devices(
        *devices.visible_devices(), num_gpus=config.num_gpus, mixed_precision=config.mixed_precision
    )
    devices.log_plan(plan)
    devices.apply_precision(plan)
    try:
        _train_and_export(
            fn_args,
            config,
            plan,
            labels,
            Sources(train_source, eval_source, statistics_uri, custom_config.get(SERVING_DIR_KEY)),
            normalization,
            crop_fraction,
        )
    finally:
        keras.mixed_precision.set_global_policy(devices.FLOAT32)


@dataclasses.dataclass(frozen=True)
class Sources:
    """What training reads beside its config: the splits, the statistics artifact, and
    the serving directory (the champion, for a warm start)."""

    train: input_lib.SplitSource
    eval: input_lib.SplitSource
    statistics_uri: str | None
    serving_dir: str | None


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


def _train_and_export(
    fn_args,
    config: TrainerConfig,
    plan: devices.DevicePlan,
    labels: list[str],
    sources: Sources,
    normalization: tuple[list[float], list[float]],
    crop_fraction: float,
) -> None:
    train_source, eval_source = sources.train, sources.eval
    strategy = devices.make_strategy(plan)
    global_batch = config.batch_size * plan.replicas
    train_memory, eval_memory = plan_input_memory(config, train_source, eval_source, global_batch)
    host_norm = normalization if config.normalize_on_host else None
    common: dict[str, Any] = dict(
        image_size=config.input_size,
        crop_fraction=crop_fraction,
        key_map=config.feature_key_map,
        normalization=host_norm,
        seed=config.seed,
    )
    train_ds = input_lib.make_dataset(
        train_source, input_lib.TRAIN, memory=train_memory, batch_size=global_batch, **common
    )
    eval_steps = fn_args.eval_steps or None
    eval_ds = input_lib.make_dataset(
        eval_source,
        input_lib.EVAL,
        memory=eval_memory,
        batch_size=global_batch,
        repeat=eval_steps is not None,
        **common,
    )
    steps_per_epoch, epochs = _schedule(
        fn_args.train_steps,
        train_source.records or 0,
        global_batch,
        config.epochs,
        config.min_train_steps,
    )
    total_steps = steps_per_epoch * epochs
    model_normalization = None if host_norm else normalization
    with strategy.scope():
        model = model_lib.build_model(config, len(labels), model_normalization)
        warm = warm_start.apply(model, config, labels, sources.serving_dir, model_normalization)
        lowered = model_lib.fit_batch_norm_to_run(model, total_steps)
        if lowered:
            logging.info(
                "Batch norm momentum lowered to %.4f in %d layers for a run of %d steps",
                model_lib.batch_norm_momentum(total_steps),
                lowered,
                total_steps,
            )
    phases = plan_phases(config, epochs, warm)
    sample_callbacks: list[keras.callbacks.Callback] = []
    if config.tensorboard_images and tensorboard_available():
        samples = input_lib.make_dataset(
            train_source,
            input_lib.TRAIN,
            batch_size=config.tensorboard_images,
            memory=memory.plan_memory(
                0,
                0,
                0,
                cache=CACHE_OFF,
                ram_budget_bytes=0,
                shuffle_buffer=config.tensorboard_images,
            ),
            **common,
        )
        with input_lib.named_read_errors(train_source):
            images, _ = next(iter(samples))
        sample_callbacks.append(
            SampleImages(os.path.join(fn_args.model_run_dir, SAMPLES_SUBDIR), images, host_norm)
        )
    done_phases = []
    val_accuracy = None
    initial_epoch = 0
    for phase in phases:
        model_lib.backbone_of(model).trainable = phase.backbone_trainable
        with strategy.scope():
            model_lib.compile_model(
                model,
                config,
                steps_per_epoch * phase.epochs,
                phase.peak_learning_rate / config.learning_rate,
            )
        logging.info(
            "Training %s, phase %s: %d epochs x %d steps, global batch %d, peak rate %g%s",
            model.name,
            phase.name,
            phase.epochs,
            steps_per_epoch,
            global_batch,
            phase.peak_learning_rate,
            "" if phase.backbone_trainable else ", backbone frozen",
        )
        callbacks = sample_callbacks + _callbacks(
            config, os.path.join(fn_args.model_run_dir, phase.name), fn_args.model_run_dir
        )
        sample_callbacks = []
        with input_lib.named_read_errors(train_source, eval_source):
            history = model.fit(
                train_ds,
                initial_epoch=initial_epoch,
                epochs=initial_epoch + phase.epochs,
                steps_per_epoch=steps_per_epoch,
                validation_data=eval_ds,
                validation_steps=eval_steps,
                callbacks=callbacks,
                verbose=2,
            )
        initial_epoch += phase.epochs
        accuracies = history.history.get("val_accuracy") or []
        val_accuracy = float(max(accuracies)) if accuracies else val_accuracy
        done_phases.append(dataclasses.replace(phase, epochs_run=len(history.epoch)))
    model_lib.backbone_of(model).trainable = True
    backup_root = config.checkpoint_dir or os.path.join(fn_args.model_run_dir, BACKUP_SUBDIR)
    if fileio.isdir(backup_root) and not fileio.list_dir(backup_root):
        fileio.remove(backup_root)  # each phase's backup is gone once it completes
    # TFX's model artifact holds Format-Serving/ (fn_args.serving_model_dir) only. It is
    # exported aside, then moved into place, so a retried Trainer never mixes exports.
    model_dir, serving_subdir = os.path.split(fn_args.serving_model_dir.rstrip("/"))
    examples_uri, eval_split = examples_uri_and_split(fn_args.eval_files[0])
    audits: list[image_stats.LabelAudit] = []  # the audit of the attempt published

    def export_and_audit(folder: str) -> None:
        with staging.local_folder(folder, "imgpipe-export-") as local:
            export.export_serving_model(
                model,
                local,
                labels,
                config.input_size,
                crop_fraction,
                host_norm,
                config.feature_key_map,
                statistics_uri=sources.statistics_uri,
            )
            audits.append(
                candidate_audit.audit_candidate(
                    local, labels, examples_uri, eval_split, config.feature_key_map
                )
            )

    outputs.publish_folder(model_dir, serving_subdir, export_and_audit)
    summary_lib.write(
        fn_args.model_run_dir,
        summary_lib.TrainingSummary(
            backbone=config.backbone,
            image_size=config.input_size,
            weights=config.weights,
            warm_start=warm.status,
            warm_start_note=warm.note,
            steps_per_epoch=steps_per_epoch,
            phases=tuple(done_phases),
            val_accuracy=val_accuracy,
            label_audit=audits[-1] if audits else None,
        ),
    )
    logging.info("Exported %s", fn_args.serving_model_dir)


def plan_input_memory(
    config: TrainerConfig,
    train_source: input_lib.SplitSource,
    eval_source: input_lib.SplitSource,
    global_batch: int,
) -> tuple[memory.MemoryPlan, memory.MemoryPlan]:
    """Memory plans for the train split, then for eval out of what train left."""
    available = memory.available_memory_bytes()
    budget = int(config.ram_budget_mb * memory.MB) if config.ram_budget_mb else None
    plans = []
    for source in (train_source, eval_source):
        plan = memory.plan_memory(
            encoded_bytes=source.encoded_bytes or 0,
            records=source.records or 0,
            available_bytes=available,
            cache=config.cache if source.encoded_bytes is not None else CACHE_OFF,
            ram_budget_bytes=budget,
            shuffle_buffer=config.shuffle_buffer,
            min_shuffle_buffer=global_batch,
        )
        logging.info(
            "Input pipeline, %s: %s; shuffle buffer %d images; tf.data RAM budget %.0f MB",
            source.name,
            plan.reason,
            plan.shuffle_buffer,
            plan.autotune_ram_budget / memory.MB,
        )
        plans.append(plan)
        spent = plan.budget_bytes - plan.autotune_ram_budget
        budget = max(plan.budget_bytes - spent, 0)
    return plans[0], plans[1]


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


@functools.cache
def tensorboard_available() -> bool:
    """tf.summary's writers live in the tensorboard package; without it, log and go on."""
    try:
        import tensorboard  # noqa: F401
    except ImportError:
        logging.warning("the tensorboard package is not installed: no TensorBoard logs")
        return False
    return True


def _callbacks(
    config: TrainerConfig, log_dir: str, model_run_dir: str
) -> list[keras.callbacks.Callback]:
    """Preemption backup (one per phase), TensorBoard and early stopping."""
    phase = os.path.basename(log_dir)
    backup_dir = os.path.join(
        config.checkpoint_dir or os.path.join(model_run_dir, BACKUP_SUBDIR), phase
    )
    callbacks: list[keras.callbacks.Callback] = [
        keras.callbacks.BackupAndRestore(backup_dir, double_checkpoint=True)
    ]
    if tensorboard_available():
        callbacks.append(keras.callbacks.TensorBoard(log_dir=log_dir, update_freq="epoch"))
    if config.early_stopping_patience:
        callbacks.append(
            keras.callbacks.EarlyStopping(
                monitor="val_loss",
                patience=config.early_stopping_patience,
                restore_best_weights=True,
            )
        )
    return callbacks
