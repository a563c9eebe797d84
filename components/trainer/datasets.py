"""The input pipelines of one training run: memory plans for the splits, the train and
eval datasets, and the augmented sample images written to TensorBoard."""

from __future__ import annotations

import functools
import os
from collections.abc import Sequence
from typing import Any

import keras
import tensorflow as tf
from absl import logging

from imgpipe.components.common.images.model_input import ModelInput
from imgpipe.components.trainer import input as input_lib
from imgpipe.components.trainer import memory, read_errors
from imgpipe.components.trainer.config import CACHE_OFF, TrainerConfig

SAMPLES_SUBDIR = "samples"


@functools.cache
def tensorboard_available() -> bool:
    """tf.summary's writers live in the tensorboard package; without it, log and go on."""
    try:
        import tensorboard  # noqa: F401
    except ImportError:
        logging.warning("the tensorboard package is not installed: no TensorBoard logs")
        return False
    return True


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


def sample_callbacks(
    config: TrainerConfig,
    train_source: input_lib.SplitSource,
    model_run_dir: str,
    model_input: ModelInput,
) -> list[keras.callbacks.Callback]:
    """SampleImages of augmented training images, when TensorBoard is there."""
    if not (config.tensorboard_images and tensorboard_available()):
        return []
    samples = input_lib.make_dataset(
        train_source,
        input_lib.TRAIN,
        batch_size=config.tensorboard_images,
        memory=memory.plan_memory(
            0, 0, 0, cache=CACHE_OFF, ram_budget_bytes=0, shuffle_buffer=config.tensorboard_images
        ),
        seed=config.seed,
        **pipeline_arguments(config, model_input),
    )
    with read_errors.named_read_errors(train_source):
        images, _ = next(iter(samples))
    return [
        SampleImages(
            os.path.join(model_run_dir, SAMPLES_SUBDIR), images, model_input.host_normalization
        )
    ]


def pipeline_arguments(config: TrainerConfig, model_input: ModelInput) -> dict[str, Any]:
    """make_dataset's arguments that the train and eval pipelines share."""
    return dict(
        image_size=model_input.image_size,
        crop_fraction=model_input.crop_fraction,
        key_map=config.feature_key_map,
        normalization=model_input.host_normalization,
    )


def plan_input_memory(
    config: TrainerConfig,
    train_source: input_lib.SplitSource,
    eval_source: input_lib.SplitSource,
    global_batch: int,
    decoded_image_bytes: int,
    workers: int = 1,
) -> tuple[memory.MemoryPlan, memory.MemoryPlan]:
    """Memory plans for the train split, then for eval out of what train left; eval's
    cache may hold its decoded images, `decoded_image_bytes` each. With `workers`, for
    one worker's share of each split."""
    available = memory.available_memory_bytes()
    budget = int(config.ram_budget_mb * memory.MB) if config.ram_budget_mb else None
    plans = []
    for source in (train_source, eval_source):
        records = -(-(source.records or 0) // workers)
        decoded = None
        if source is eval_source and source.records is not None:
            decoded = records * decoded_image_bytes
        plan = memory.plan_memory(
            encoded_bytes=-(-(source.encoded_bytes or 0) // workers),
            records=records,
            available_bytes=available,
            cache=config.cache if source.encoded_bytes is not None else CACHE_OFF,
            ram_budget_bytes=budget,
            shuffle_buffer=config.shuffle_buffer,
            min_shuffle_buffer=global_batch,
            decoded_bytes=decoded,
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


def make_datasets(
    config: TrainerConfig,
    splits: tuple[input_lib.SplitSource, input_lib.SplitSource],
    global_batch: int,
    model_input: ModelInput,
    eval_steps: int | None,
    seed: int,
    worker: tuple[int, int] = (1, 0),
) -> tuple[tf.data.Dataset, tf.data.Dataset]:
    """The train and eval datasets; `seed` seeds the train shuffles (resume.data_seed).

    Args:
      model_input: the side, crop and normalization both pipelines produce.
      eval_steps: None evaluates the whole eval split, once per evaluation.
      worker: (workers, this worker's index): each worker reads its share of each split.
    """
    train_source, eval_source = splits
    workers, index = worker
    shards: list[input_lib.Shard | None] = [None, None]
    if workers > 1:
        for i, (source, mode) in enumerate(
            ((train_source, input_lib.TRAIN), (eval_source, input_lib.EVAL))
        ):
            shards[i], how = input_lib.choose_shard(len(source.files), workers, index, mode)
            logging.info(
                "Input pipeline, %s: worker %d of %d reads %s", source.name, index, workers, how
            )
    train_memory, eval_memory = plan_input_memory(
        config, train_source, eval_source, global_batch, model_input.decoded_image_bytes, workers
    )
    common = pipeline_arguments(config, model_input)
    train_ds = input_lib.make_dataset(
        train_source,
        input_lib.TRAIN,
        memory=train_memory,
        batch_size=global_batch,
        seed=seed,
        shard=shards[0],
        **common,
    )
    eval_ds = input_lib.make_dataset(
        eval_source,
        input_lib.EVAL,
        memory=eval_memory,
        batch_size=global_batch,
        repeat=eval_steps is not None,
        seed=config.seed,
        shard=shards[1],
        **common,
    )
    return train_ds, eval_ds
