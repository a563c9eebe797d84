"""The TFX Trainer entry point: `run_fn(fn_args)` trains, checkpoints and exports.

Reads the `Examples` artifact (shards, label map, conversion summary) and the
ImageStatistics artifact (mean and std), whose URI the ImageTrainer executor passes as
fn_args.custom_config["image_statistics_uri"].
"""

from __future__ import annotations

import functools
import math
import os
from collections.abc import Sequence
from typing import Any

import keras
import tensorflow as tf
from absl import logging

from imgpipe.components.common import allocator, artifacts, image_stats, layout, model_input
from imgpipe.components.trainer import devices, export, memory
from imgpipe.components.trainer import input as input_lib
from imgpipe.components.trainer import model as model_lib
from imgpipe.components.trainer.config import (
    CACHE_OFF,
    IMAGE_STATISTICS_URI_KEY,
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
    """
    stats: image_stats.Normalization | None = None
    if statistics_uri:
        try:
            stats = image_stats.read(statistics_uri).normalization(train_split)
        except KeyError as e:
            raise ValueError(f"{statistics_uri}: {e.args[0]}") from None
        if stats.image_size != config.image_size:
            logging.warning(
                "statistics were computed at %d px, the model trains at %d px",
                stats.image_size,
                config.image_size,
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
    config = from_custom_config(custom_config)
    if config.tune_malloc:
        allocator.tune_malloc()
    examples_uri, train_split = examples_uri_and_split(fn_args.train_files[0])
    _, eval_split = examples_uri_and_split(fn_args.eval_files[0])
    mean, std, crop_fraction = resolve_normalization(
        config, custom_config.get(IMAGE_STATISTICS_URI_KEY), train_split
    )
    labels = artifacts.load_labels(examples_uri)
    train_source = input_lib.split_source(examples_uri, train_split)
    eval_source = input_lib.split_source(examples_uri, eval_split)

    plan = devices.plan_devices(
        *devices.visible_devices(), num_gpus=config.num_gpus, mixed_precision=config.mixed_precision
    )
    devices.log_plan(plan)
    devices.apply_precision(plan)
    try:
        _train_and_export(
            fn_args, config, plan, labels, train_source, eval_source, (mean, std), crop_fraction
        )
    finally:
        keras.mixed_precision.set_global_policy(devices.FLOAT32)


def _train_and_export(
    fn_args,
    config: TrainerConfig,
    plan: devices.DevicePlan,
    labels: list[str],
    train_source: input_lib.SplitSource,
    eval_source: input_lib.SplitSource,
    normalization: tuple[list[float], list[float]],
    crop_fraction: float,
) -> None:
    strategy = devices.make_strategy(plan)
    global_batch = config.batch_size * plan.replicas
    train_memory, eval_memory = plan_input_memory(config, train_source, eval_source, global_batch)
    host_norm = normalization if config.normalize_on_host else None
    common: dict[str, Any] = dict(
        image_size=config.image_size,
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
        fn_args.train_steps, train_source.records or 0, global_batch, config.epochs
    )
    total_steps = steps_per_epoch * epochs
    with strategy.scope():
        model = model_lib.build_model(config, len(labels), None if host_norm else normalization)
        lowered = model_lib.fit_batch_norm_to_run(model, total_steps)
        if lowered:
            logging.info(
                "Batch norm momentum lowered to %.4f in %d layers for a run of %d steps",
                model_lib.batch_norm_momentum(total_steps),
                lowered,
                total_steps,
            )
        model_lib.compile_model(model, config, total_steps)

    callbacks = _callbacks(config, fn_args.model_run_dir)
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
        callbacks.append(
            SampleImages(os.path.join(fn_args.model_run_dir, SAMPLES_SUBDIR), images, host_norm)
        )
    logging.info(
        "Training %s for %d epochs x %d steps, global batch %d",
        model.name,
        epochs,
        steps_per_epoch,
        global_batch,
    )
    with input_lib.named_read_errors(train_source, eval_source):
        model.fit(
            train_ds,
            epochs=epochs,
            steps_per_epoch=steps_per_epoch,
            validation_data=eval_ds,
            validation_steps=eval_steps,
            callbacks=callbacks,
            verbose=2,
        )
    export.export_serving_model(
        model,
        fn_args.serving_model_dir,
        labels,
        config.image_size,
        crop_fraction,
        host_norm,
        config.feature_key_map,
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
    train_steps: int | None, records: int, global_batch: int, epochs: int
) -> tuple[int, int]:
    """(steps per epoch, epochs): TrainArgs.num_steps spread over the epochs, or one
    pass over the records per epoch when num_steps is unset."""
    if train_steps:
        epochs = min(epochs, train_steps)
        return math.ceil(train_steps / epochs), epochs
    if records < global_batch:
        raise ValueError(
            f"{records} training records cannot fill one batch of "
            f"{global_batch}; set TrainArgs.num_steps or a smaller batch"
        )
    return records // global_batch, epochs


@functools.cache
def tensorboard_available() -> bool:
    """tf.summary's writers live in the tensorboard package; without it, log and go on."""
    try:
        import tensorboard  # noqa: F401
    except ImportError:
        logging.warning("the tensorboard package is not installed: no TensorBoard logs")
        return False
    return True


def _callbacks(config: TrainerConfig, model_run_dir: str) -> list[keras.callbacks.Callback]:
    backup_dir = config.checkpoint_dir or os.path.join(model_run_dir, BACKUP_SUBDIR)
    callbacks: list[keras.callbacks.Callback] = [
        keras.callbacks.BackupAndRestore(backup_dir, double_checkpoint=True)
    ]
    if tensorboard_available():
        callbacks.append(keras.callbacks.TensorBoard(log_dir=model_run_dir, update_freq="epoch"))
    if config.early_stopping_patience:
        callbacks.append(
            keras.callbacks.EarlyStopping(
                monitor="val_loss",
                patience=config.early_stopping_patience,
                restore_best_weights=True,
            )
        )
    return callbacks
