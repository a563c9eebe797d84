"""NVIDIA DALI pipelines over ImageExampleGen's shards, for GPU nodes.

DALI's TFRecord reader reads the shards through the index files ImageExampleGen writes
beside them (layout.DALI_INDEX_DIR), then applies the input_fn's training preprocessing:
random-resized-crop fused into the JPEG decode, resize, horizontal flip, batch. On GPU
(`device=GPU`) the decoder is DALI's `mixed` one: nvJPEG, on the hardware JPEG decoder
where the GPU has one (A100, H100), and the resize and flip run on the GPU. On CPU
everything runs on the host: that is what the tests and `make bench` run, with no GPU.

The Trainer's run_fn keeps tf.data (input.py). This is for training loops fed by DALI,
through its TensorFlow or PyTorch plugins (README: "Reading the shards with NVIDIA DALI").
DALI is imported when a pipeline is built, so nothing else needs it installed.

Example:
  pipe = dali_input.train_pipeline(examples_uri, "train", batch_size=64, image_size=224)
  pipe.build()
  images, labels = pipe.run()  # uint8 [64, 224, 224, 3] (HWC), int64 [64, 1]
"""

from __future__ import annotations

import os
from typing import Any

import tensorflow as tf

from imgpipe.components.common.formats import artifacts
from imgpipe.components.common.formats.features import DEFAULT_KEY_MAP, FeatureKeyMap
from imgpipe.components.common.images import preprocessing

CPU = "cpu"
GPU = "gpu"
DEVICES = (CPU, GPU)
READER_NAME = "Reader"
# Records DALI's reader holds to shuffle from (its default is 1024).
SHUFFLE_BUFFER = 1024


def split_files(examples_uri: str, split: str) -> tuple[list[str], list[str]]:
    """The shards of `split` and their DALI index files, in the same (sorted) order.

    Raises:
      FileNotFoundError: no shard matches, or a shard has no index file (GZIP shards
        have none, nor do shards converted with dali_index off); names the fix.
    """
    pattern = artifacts.split_shard_pattern(examples_uri, split)
    shards = sorted(tf.io.gfile.glob(pattern))
    if not shards:
        raise FileNotFoundError(
            f"no shards match {pattern}: is {examples_uri} an Examples artifact"
        )
    indexes = [artifacts.dali_index_path(examples_uri, split, shard) for shard in shards]
    for shard, index in zip(shards, indexes, strict=True):
        if not tf.io.gfile.exists(index):
            raise FileNotFoundError(
                f"{os.path.basename(shard)} has no DALI index ({index} is missing): convert "
                "again without gzip and with dali_index on, or run DALI's tfrecord2idx on it"
            )
    return shards, indexes


def train_pipeline(
    examples_uri: str,
    split: str,
    *,
    batch_size: int,
    image_size: int,
    device: str = CPU,
    device_id: int | None = None,
    num_threads: int | None = None,
    shard_id: int = 0,
    num_shards: int = 1,
    seed: int | None = None,
    key_map: FeatureKeyMap = DEFAULT_KEY_MAP,
) -> Any:
    """A DALI pipeline of training batches: (uint8 images [B, S, S, 3], labels [B, 1]).

    Args:
      examples_uri: an ImageExampleGen `Examples` artifact written with its index files.
      split: the split to read.
      batch_size: images per batch.
      image_size: the output side S in pixels.
      device: CPU runs everything on the host; GPU decodes with DALI's mixed decoder
        (nvJPEG, hardware-accelerated where the GPU has it) and resizes on the GPU.
      device_id: the GPU; required for GPU, None for CPU.
      num_threads: DALI's CPU worker threads; default: every core.
      shard_id, num_shards: this process's share of the records, one per GPU/worker.
      seed: DALI's seed; None draws one.
      key_map: the Examples' feature names.

    Returns:
      An unbuilt nvidia.dali.Pipeline.

    Raises:
      ValueError: a bad device or device_id.
      FileNotFoundError: see `split_files`.
    """
    if device not in DEVICES:
        raise ValueError(f"device must be one of {DEVICES}, got {device!r}")
    if (device == GPU) != (device_id is not None):
        raise ValueError(
            f"device {device!r} takes device_id={'a GPU index' if device == GPU else None}"
        )
    files, indexes = split_files(examples_uri, split)
    import nvidia.dali.tfrecord as tfrec
    from nvidia.dali import fn, pipeline_def, types

    @pipeline_def(
        batch_size=batch_size,
        num_threads=num_threads or os.cpu_count() or 1,
        device_id=device_id,
        seed=seed,
    )
    def pipeline():
        inputs = fn.readers.tfrecord(
            path=files,
            index_path=indexes,
            features={
                key_map.encoded: tfrec.FixedLenFeature((), tfrec.string, ""),
                key_map.label: tfrec.FixedLenFeature([1], tfrec.int64, -1),
            },
            random_shuffle=True,
            initial_fill=SHUFFLE_BUFFER,
            shard_id=shard_id,
            num_shards=num_shards,
            name=READER_NAME,
        )
        images = fn.decoders.image_random_crop(
            inputs[key_map.encoded],
            device="mixed" if device == GPU else CPU,
            output_type=types.RGB,
            random_area=list(preprocessing.TRAIN_AREA_RANGE),
            random_aspect_ratio=list(preprocessing.TRAIN_ASPECT_RATIO_RANGE),
        )
        # Bilinear without antialiasing, as the input_fn's resize.
        images = fn.resize(
            images, device=device, resize_x=image_size, resize_y=image_size, antialias=False
        )
        images = fn.flip(images, device=device, horizontal=fn.random.coin_flip())
        return images, inputs[key_map.label] - key_map.label_offset

    return pipeline()
