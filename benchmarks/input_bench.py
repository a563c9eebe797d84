"""The Trainer's input_fn against its ceiling and two baselines, in one process.

Pipelines, each yielding batches of `batch_size` images at `image_size` px:
  input_fn                  imgpipe.components.trainer.input.make_dataset in TRAIN mode, with the
                            RAM plan run_fn would make (uint8 out, normalized on device).
  input_fn_host_normalized  the same, normalizing to float32 on the host.
  decode_ceiling            the same encoded bytes held in memory, tf.io.decode_jpeg only,
                            parallel over all cores: no reading, parsing, crop or resize.
  decode_ceiling_batched    the same, batched first and decoded by map_fn per batch (the
                            input_fn's shape; the shards hold 256x256 images, so they
                            stack). The ratio uses the faster of the two.
  decode_ceiling_train_dct  the per-image one with the fast integer IDCT that training decodes with
                            (preprocessing.TRAIN_DCT_METHOD).
  augment_ceiling           the in-memory bytes and sizes through the same batched train
                            preprocessing (crop-decode, flip, resize), all cores.
  image_dataset_from_directory  keras' folder loader on the original photos.
  sequential                the articles' pipeline: TFRecordDataset.map(parse, decode,
                            resize), no parallelism asked for (TF still runs the
                            reader, the map and ops like resize on their own threads).
  sequential_one_thread     the same confined to one thread, for reference.
  dali_cpu                  NVIDIA DALI's CPU pipeline on the same shards, through their
                            index files (benchmarks/dali_input.py): its TFRecord
                            reader, random-resized-crop decode, resize, flip, batch, with
                            one DALI thread per core. DALI's peer on GPU nodes is its
                            `mixed` decoder, which this machine cannot run.
`augment_ceiling` bounds the input_fn: it is the same preprocessing with no reading,
parsing or shuffling, so its ratios to the decode ceiling and to the sequential pipeline
are about the most the input_fn can reach with that preprocessing.
Measurements alternate between pipelines for `rounds` rounds and keep each one's best,
since other work shares the machine. Steady state: the cached input_fn is warmed up over
one full epoch first.

`gpu_feed` reports training steps/s on real input / steps/s on synthetic in-memory data;
1.0 means the accelerator never waits for data.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Iterable

import tensorflow as tf

from benchmarks import dali_input
from imgpipe.components.common.formats import artifacts, layout
from imgpipe.components.common.images import preprocessing
from imgpipe.components.common.images.model_input import DEFAULT_IMAGE_SIZE, ModelInput
from imgpipe.components.common.runtime import allocator
from imgpipe.components.trainer import input as input_lib
from imgpipe.components.trainer import memory
from imgpipe.components.trainer.config import MOBILENET_V3_SMALL

TARGETS = {"vs_decode_ceiling": 0.85, "vs_image_dataset_from_directory": 2.0, "vs_sequential": 1.8}
MEAN, STD = (124.0, 116.0, 104.0), (58.0, 57.0, 57.0)
AUTOTUNE = tf.data.AUTOTUNE
# Batches before the clock starts, for tf.data's autotuner to settle on its parallelism;
# the timed window (run's `batches`) is seconds long, a steady state rather than a start.
WARMUP_BATCHES = 20


def _images_per_second(dataset: Iterable, batches: int, warmup: int, batch_size: int) -> float:
    iterator = iter(dataset)
    for _ in range(warmup):
        next(iterator)
    start = time.perf_counter()
    for _ in range(batches):
        next(iterator)
    return batches * batch_size / (time.perf_counter() - start)


class _DaliBatches:
    """A built DALI pipeline as an iterable of batches, as the measurement takes them."""

    def __init__(self, pipeline):
        self._pipeline = pipeline
        pipeline.build()

    def __iter__(self):
        while True:
            yield self._pipeline.run()


def _encoded_images(source: input_lib.SplitSource) -> tuple[tf.Tensor, tf.Tensor]:
    """The split's encoded images [N] and their [height, width] [N, 2], in memory."""
    records = input_lib.read_records(source, input_lib.EVAL).batch(1024)
    parsed = [input_lib.parse_batch(batch, input_lib.DEFAULT_KEY_MAP) for batch in records]
    return (
        tf.concat([encoded for encoded, _, _ in parsed], axis=0),
        tf.concat([shapes for _, _, shapes in parsed], axis=0),
    )


def _pipelines(
    examples_dir: str, image_folder: str, batch_size: int, image_size: int
) -> tuple[dict[str, Callable[[], Iterable]], dict]:
    source = input_lib.split_source(examples_dir, layout.TRAIN_SPLIT)
    plan = memory.plan_memory(
        source.encoded_bytes or 0,
        source.records or 0,
        memory.available_memory_bytes(),
        min_shuffle_buffer=batch_size,
    )
    encoded, shapes = _encoded_images(source)
    size = [image_size, image_size]

    def ours(normalization=None) -> tf.data.Dataset:
        return input_lib.make_dataset(
            source,
            input_lib.TRAIN,
            image_size=image_size,
            batch_size=batch_size,
            memory=plan,
            normalization=normalization,
        )

    def in_memory(fn) -> tf.data.Dataset:
        return (
            tf.data.Dataset.from_tensor_slices(encoded)
            .repeat()
            .map(fn, num_parallel_calls=AUTOTUNE, deterministic=False)
            .batch(batch_size)
            .prefetch(AUTOTUNE)
        )

    def in_memory_batched(fn, shape) -> tf.data.Dataset:
        """Batch first, then map_fn over each batch (as the input_fn does)."""
        return (
            tf.data.Dataset.from_tensor_slices(encoded)
            .repeat()
            .batch(batch_size)
            .map(
                lambda b: tf.map_fn(fn, b, fn_output_signature=tf.TensorSpec(shape, tf.uint8)),
                num_parallel_calls=AUTOTUNE,
                deterministic=False,
            )
            .prefetch(AUTOTUNE)
        )

    def from_directory() -> tf.data.Dataset:
        return tf.keras.utils.image_dataset_from_directory(
            image_folder, image_size=size, batch_size=batch_size, seed=0, verbose=False
        ).repeat()

    def sequential(one_core: bool = False) -> tf.data.Dataset:
        features = {
            "image/encoded": tf.io.FixedLenFeature([], tf.string),
            "image/class/label": tf.io.FixedLenFeature([], tf.int64),
        }

        def parse(record):
            example = tf.io.parse_single_example(record, features)
            image = tf.io.decode_jpeg(example["image/encoded"], channels=3)
            return tf.image.resize(image, size) / 255.0, example["image/class/label"]

        dataset = (
            tf.data.TFRecordDataset(list(source.files), source.compression)
            .repeat()
            .map(parse)
            .batch(batch_size)
        )
        if one_core:
            options = tf.data.Options()
            options.threading.private_threadpool_size = 1
            options.threading.max_intra_op_parallelism = 1
            dataset = dataset.with_options(options)
        return dataset

    pipelines = {
        "input_fn": ours,
        "input_fn_host_normalized": lambda: ours((MEAN, STD)),
        "decode_ceiling": lambda: in_memory(lambda e: tf.io.decode_jpeg(e, channels=3)),
        "decode_ceiling_batched": lambda: in_memory_batched(
            lambda e: tf.io.decode_jpeg(e, channels=3), [None, None, 3]
        ),
        "decode_ceiling_train_dct": lambda: in_memory(
            lambda e: tf.io.decode_jpeg(e, channels=3, dct_method=preprocessing.TRAIN_DCT_METHOD)
        ),
        "augment_ceiling": lambda: (
            tf.data.Dataset.from_tensor_slices((encoded, shapes))
            .repeat()
            .batch(batch_size)
            .map(
                lambda e, s: preprocessing.train_images(e, image_size, s),
                num_parallel_calls=AUTOTUNE,
                deterministic=False,
            )
            .prefetch(AUTOTUNE)
        ),
        "image_dataset_from_directory": from_directory,
        "sequential": sequential,
        "sequential_one_thread": lambda: sequential(one_core=True),
        "dali_cpu": lambda: _DaliBatches(
            dali_input.train_pipeline(
                examples_dir, layout.TRAIN_SPLIT, batch_size=batch_size, image_size=image_size
            )
        ),
    }
    info = {
        "records": source.records,
        "encoded_mb": round((source.encoded_bytes or 0) / 2**20, 1),
        "cache": plan.cache,
        "cache_decision": plan.reason,
        "shuffle_buffer": plan.shuffle_buffer,
    }
    return pipelines, info


def run(
    examples_dir: str,
    image_folder: str,
    batch_size: int = 64,
    image_size: int = DEFAULT_IMAGE_SIZE,
    batches: int = 150,
    rounds: int = 5,
) -> dict:
    """Images/s of each pipeline and the input_fn's ratios to the others.

    Args:
      examples_dir: an ImageExampleGen output (shards converted at 256 px).
      image_folder: the original photos, for image_dataset_from_directory.
      batches: timed batches per measurement.
      rounds: measurements per pipeline; the best is kept.
    """
    malloc_tuned = allocator.tune_malloc()  # as run_fn does; applies to every pipeline
    pipelines, info = _pipelines(examples_dir, image_folder, batch_size, image_size)
    epoch_batches = -(-(info["records"] or 0) // batch_size)
    best: dict[str, float] = {}
    for round_index in range(rounds):
        for name, make in pipelines.items():
            # The first input_fn measurement fills the RAM cache: warm up one epoch.
            warmup = (
                epoch_batches + WARMUP_BATCHES
                if round_index == 0 and name.startswith("input_fn")
                else WARMUP_BATCHES
            )
            ips = _images_per_second(make(), batches, warmup, batch_size)
            best[name] = max(best.get(name, 0.0), ips)
    ours = best["input_fn"]
    decode_ceiling = max(best["decode_ceiling"], best["decode_ceiling_batched"])
    ratios = {
        "vs_decode_ceiling": ours / decode_ceiling,
        "vs_decode_ceiling_train_dct": ours / best["decode_ceiling_train_dct"],
        "vs_augment_ceiling": ours / best["augment_ceiling"],
        "vs_image_dataset_from_directory": ours / best["image_dataset_from_directory"],
        "vs_sequential": ours / best["sequential"],
        "vs_sequential_one_thread": ours / best["sequential_one_thread"],
        "host_normalization_cost": 1 - best["input_fn_host_normalized"] / ours,
        "augment_ceiling_vs_decode_ceiling": best["augment_ceiling"] / decode_ceiling,
        "augment_ceiling_vs_sequential": best["augment_ceiling"] / best["sequential"],
        "vs_dali_cpu": ours / best["dali_cpu"],
    }
    return {
        "batch_size": batch_size,
        "image_size": image_size,
        "malloc_tuned": malloc_tuned,
        **info,
        "images_per_second": {k: round(v, 1) for k, v in best.items()},
        "ratios": {k: round(v, 3) for k, v in ratios.items()},
        "targets": TARGETS,
        "meets_targets": {k: ratios[k] >= v for k, v in TARGETS.items()},
    }


class _EpochTimer(tf.keras.callbacks.Callback):
    def __init__(self):
        super().__init__()
        self.seconds: list[float] = []

    def on_epoch_begin(self, epoch, logs=None):
        self._start = time.perf_counter()

    def on_epoch_end(self, epoch, logs=None):
        self.seconds.append(time.perf_counter() - self._start)


def gpu_feed(
    examples_dir: str,
    backbone: str = MOBILENET_V3_SMALL,
    image_size: int = DEFAULT_IMAGE_SIZE,
    batch_size: int = 32,
    steps: int = 8,
) -> dict:
    """Training steps/s on the real input_fn / steps/s on one batch repeated from memory.

    Runs on whatever devices TF sees (the Trainer's own device plan: GPUs and mixed
    precision when present, CPU here).
    """
    import keras

    from imgpipe.components.trainer import devices
    from imgpipe.components.trainer import model as model_lib
    from imgpipe.components.trainer.config import TrainerConfig

    allocator.tune_malloc()
    plan = devices.plan_devices(*devices.visible_devices())
    devices.apply_precision(plan)
    try:
        source = input_lib.split_source(examples_dir, layout.TRAIN_SPLIT)
        global_batch = batch_size * plan.replicas
        mem = memory.plan_memory(
            source.encoded_bytes or 0,
            source.records or 0,
            memory.available_memory_bytes(),
            min_shuffle_buffer=global_batch,
        )
        real = input_lib.make_dataset(
            source, input_lib.TRAIN, image_size=image_size, batch_size=global_batch, memory=mem
        )
        batch = next(iter(real))
        synthetic = tf.data.Dataset.from_tensors(batch).repeat()
        config = TrainerConfig(backbone=backbone, image_size=image_size)
        with devices.make_strategy(plan).scope():
            model = model_lib.build_model(
                config, len(artifacts.load_labels(examples_dir)), ModelInput(MEAN, STD, image_size)
            )
            model_lib.compile_model(model, config, total_steps=10 * steps)
        rates = {}
        for name, dataset in (
            ("synthetic", synthetic),
            ("real", real),
            ("synthetic_again", synthetic),
            ("real_again", real),
        ):
            timer = _EpochTimer()
            # Epoch 1 compiles and fills buffers; epoch 2, on the same iterator, is timed.
            model.fit(dataset, steps_per_epoch=steps, epochs=2, verbose=0, callbacks=[timer])
            rates[name] = steps / timer.seconds[-1]
        real_rate = max(rates["real"], rates["real_again"])
        synthetic_rate = max(rates["synthetic"], rates["synthetic_again"])
        return {
            "devices": list(plan.devices),
            "policy": plan.precision_policy,
            "backbone": backbone,
            "global_batch": global_batch,
            "steps_per_second_real": round(real_rate, 3),
            "steps_per_second_synthetic": round(synthetic_rate, 3),
            "feed_ratio": round(real_rate / synthetic_rate, 3),
        }
    finally:
        keras.mixed_precision.set_global_policy(devices.FLOAT32)


def validation_epochs(
    examples_dir: str,
    image_size: int = DEFAULT_IMAGE_SIZE,
    batch_size: int = 64,
    epochs: int = 4,
) -> dict:
    """Seconds a validation pass costs in each epoch after the first, as Keras runs it (a
    new iterator every epoch), with the eval split cached encoded (the baseline: every
    pass decodes, and sets up the decode function) and cached decoded (the Trainer's plan
    when the decoded split fits), alternating, best of each; and the pixels compared."""
    source = input_lib.split_source(examples_dir, layout.EVAL_SPLIT)
    records = source.records or 0
    plans = {
        "encoded_cache": memory.plan_memory(source.encoded_bytes or 0, records, 1 << 34),
        "decoded_cache": memory.plan_memory(
            source.encoded_bytes or 0,
            records,
            1 << 34,
            decoded_bytes=records * image_size * image_size * 3,
        ),
    }
    assert plans["decoded_cache"].decoded and not plans["encoded_cache"].decoded
    datasets = {
        name: input_lib.make_dataset(
            source, input_lib.EVAL, image_size=image_size, batch_size=batch_size, memory=plan
        )
        for name, plan in plans.items()
    }
    passes: dict[str, list[float]] = {name: [] for name in datasets}
    first: dict[str, list] = {}
    for epoch in range(epochs):
        for name, dataset in datasets.items():
            start = time.perf_counter()
            batches = [images.numpy() for images, _ in dataset]
            if epoch:
                passes[name].append(time.perf_counter() - start)
            else:
                first[name] = batches
    same = all(
        (a == b).all() for a, b in zip(first["encoded_cache"], first["decoded_cache"], strict=True)
    )
    best = {name: min(seconds) for name, seconds in passes.items()}
    return {
        "eval_images": records,
        "image_size": image_size,
        "seconds_per_pass_after_the_first": {k: round(v, 4) for k, v in best.items()},
        "encoded_over_decoded": round(best["encoded_cache"] / best["decoded_cache"], 1),
        "same_pixels": same,
    }
