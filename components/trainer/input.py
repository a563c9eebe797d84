"""The Trainer's tf.data input pipeline over ImageExampleGen's shards.

Stages, in the order of tensorflow/models' input_reader: list shards -> shuffle shard
order (train) -> parallel interleave -> count check -> parse, PARSE_BATCH records at a
time (and map the labels of a window's spans to the model's) -> [RAM cache] -> [repeat]
-> shuffle (train) -> batch -> decode + crop + resize -> [normalize] -> prefetch. The
cache holds parsed records, so later passes neither parse nor map labels again. EVAL,
whose pixels are the same every pass, may cache its decoded batches instead
(MemoryPlan.decoded): later passes then cost nothing but the copy, where setting up the
decode function alone takes seconds a pass (Keras makes a new validation iterator each
epoch).

`decode_batch(..., EVAL)` is also the serving signature's preprocessing, so the
exported model sees exactly the pixels eval saw.

With several workers (trainer.workers), each reads its own share of a split (a Shard):
whole files when they divide evenly among the workers, else every n-th record of the one
stream all workers read alike; the share is taken before the cache, the shuffle and the
decode, so each worker caches and decodes its share only.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Sequence

import numpy as np
import tensorflow as tf
from absl import logging

from imgpipe.components.common.formats import artifacts, conversion_summary, layout
from imgpipe.components.common.formats.features import DEFAULT_KEY_MAP, FeatureKeyMap
from imgpipe.components.common.images import preprocessing
from imgpipe.components.common.images.model_input import DEFAULT_CROP_FRACTION
from imgpipe.components.common.storage import fileio
from imgpipe.components.trainer.memory import MemoryPlan

TRAIN = "train"
EVAL = "eval"
MODES = (TRAIN, EVAL)

# Files read concurrently; more than the shard count would only add idle readers.
MAX_CYCLE_LENGTH = 16
READ_BUFFER_BYTES = 8 * 1024 * 1024
# Records parsed by one call: per record, a parse costs far less in batches.
PARSE_BATCH = 256


# Shard.by: how a split is divided among workers.
BY_FILE = "file"
BY_RECORD = "record"


@dataclasses.dataclass(frozen=True)
class Shard:
    """One worker's share of a split: files (BY_FILE) or records (BY_RECORD) number
    `index`, `index + count`, `index + 2 count`, ... of the split's sorted files or of the
    record stream every worker reads in the same order."""

    count: int
    index: int
    by: str

    def __post_init__(self) -> None:
        if self.by not in (BY_FILE, BY_RECORD) or not 0 <= self.index < self.count:
            raise ValueError(f"not a shard: {self}")


def choose_shard(files: int, workers: int, index: int, mode: str) -> tuple[Shard, str]:
    """How worker `index` of `workers` shares a split of `files` files, and why.

    TRAIN is shared by file when the files divide evenly among the workers (a worker with
    more files would see its records more often); otherwise, and always in EVAL (whose
    shares must be alike, and whose order is fixed), every worker reads every file in the
    same order and keeps every `workers`-th record.
    """
    if mode == TRAIN and files >= workers and files % workers == 0:
        return Shard(workers, index, BY_FILE), f"{files // workers} of its {files} files"
    if mode == TRAIN:
        why = (
            f"its {files} files are fewer than the {workers} workers"
            if files < workers
            else f"its {files} files do not divide evenly among {workers} workers"
        )
        return Shard(workers, index, BY_RECORD), (
            f"one record in {workers} of every file, as {why} (for a share of whole files, "
            f"write a multiple of {workers} shards: ImageExampleGen num_shards)"
        )
    return Shard(workers, index, BY_RECORD), f"one record in {workers} of every file"


@dataclasses.dataclass(frozen=True)
class SplitSource:
    """The shards of one split and what ImageExampleGen recorded about them.

    Attributes:
      files: shard paths, sorted.
      records: records ImageExampleGen wrote; None skips the count check.
      encoded_bytes: bytes of the records, for the cache decision; None if unknown.
      name: how errors name the split, e.g. "gs://bucket/examples split 'train'".
      label_remaps: for a split read from several spans (window.py), one table per
        file from the label ids its span wrote to the model's; None: the ids as written.
    """

    files: tuple[str, ...]
    records: int | None = None
    encoded_bytes: int | None = None
    name: str = ""
    label_remaps: tuple[tuple[int, ...], ...] | None = None

    @property
    def compression(self) -> str:
        compressions = {artifacts.shard_compression(f) for f in self.files}
        if len(compressions) > 1:
            raise ValueError(f"{self.name}: mixes GZIP (.gz) and plain shards: {list(self.files)}")
        return compressions.pop() if compressions else ""


def split_source(examples_uri: str, split: str) -> SplitSource:
    """The shards of `split` in an ImageExampleGen `Examples` artifact, with its counts.

    Raises:
      FileNotFoundError: no shard matches, naming the pattern.
    """
    pattern = artifacts.split_shard_pattern(examples_uri, split)
    files = tuple(fileio.glob(pattern))
    if not files:
        raise FileNotFoundError(
            f"no shards match {pattern}: is {examples_uri} an Examples "
            f"artifact with a split {split!r}?"
        )
    name = f"{examples_uri} split {split!r}"
    summary = conversion_summary.read_if_present(examples_uri)
    if summary is None:
        logging.warning("%s: no %s, so record counts are not checked", name, layout.SUMMARY_FILE)
        return SplitSource(files, name=name)
    if split not in summary.splits:
        raise KeyError(
            f"{examples_uri}/{layout.SUMMARY_FILE} has no split {split!r}; "
            f"it has {sorted(summary.splits)}"
        )
    counts = summary.splits[split]
    return SplitSource(files, counts.records, counts.bytes_out, name)


def combine(
    sources: Sequence[SplitSource], remaps: Sequence[tuple[int, ...] | None], num_labels: int
) -> SplitSource:
    """One split read from several spans' shards: the counts added, and each file's
    label ids mapped to the model's `num_labels` classes by `remaps` (one per source;
    None: as written).

    Raises:
      ValueError: no source, or sources and remaps of different lengths.
    """
    if not sources or len(sources) != len(remaps):
        raise ValueError("combine needs one remap (or None) per source, and a source")
    if len(sources) == 1 and remaps[0] is None:
        return sources[0]
    counts = [s.records for s in sources]
    sizes = [s.encoded_bytes for s in sources]
    width = max([num_labels, 1] + [len(r) for r in remaps if r is not None])
    tables = []
    for source, remap in zip(sources, remaps, strict=True):
        table = tuple(remap) if remap is not None else tuple(range(width))
        tables += [table + (-1,) * (width - len(table))] * len(source.files)
    return SplitSource(
        files=tuple(f for s in sources for f in s.files),
        records=None if None in counts else sum(c for c in counts if c is not None),
        encoded_bytes=None if None in sizes else sum(b for b in sizes if b is not None),
        name=" + ".join(s.name for s in sources),
        label_remaps=tuple(tables),
    )


def decode_batch(
    encoded: tf.Tensor,
    mode: str,
    image_size: int,
    crop_fraction: float = DEFAULT_CROP_FRACTION,
    shapes: tf.Tensor | None = None,
) -> tf.Tensor:
    """Decodes a batch of encoded JPEG/PNG images to uint8 [B, S, S, 3].

    Eval: `preprocessing.eval_images` (center crop, resize). Train:
    `preprocessing.train_images` (random-resized-crop fused into the JPEG decode, flip),
    with the images' [height, width] from `shapes` when the Examples carry them.
    """
    if mode == TRAIN:
        return preprocessing.train_images(encoded, image_size, shapes)
    if mode == EVAL:
        return preprocessing.eval_images(encoded, image_size, crop_fraction)
    raise ValueError(f"mode must be one of {MODES}, got {mode!r}")


def normalize(images: tf.Tensor, mean: Sequence[float], std: Sequence[float]) -> tf.Tensor:
    """(float(x) - mean) / std per channel, for uint8 images [..., H, W, 3].

    Written as one multiply-add against full-size scale and offset images: broadcasting a
    3-vector over the last axis is several times slower on CPU.
    """
    shape = images.shape[-3:]
    scale = np.broadcast_to(1.0 / np.asarray(std, np.float32), shape)
    offset = np.broadcast_to(-np.asarray(mean, np.float32) / np.asarray(std, np.float32), shape)
    return tf.cast(images, tf.float32) * scale + offset


def parse_batch(
    serialized: tf.Tensor, key_map: FeatureKeyMap
) -> tuple[tf.Tensor, tf.Tensor, tf.Tensor | None]:
    """Parses a batch of serialized Examples.

    Returns:
      (encoded bytes [B], 0-based labels [B], [height, width] [B, 2] or None when the
      key map has no size features).
    """
    features = {
        key_map.encoded: tf.io.FixedLenFeature([], tf.string),
        key_map.label: tf.io.FixedLenFeature([], tf.int64),
    }
    has_size = key_map.height is not None and key_map.width is not None
    if key_map.height is not None and key_map.width is not None:
        features[key_map.height] = tf.io.FixedLenFeature([], tf.int64)
        features[key_map.width] = tf.io.FixedLenFeature([], tf.int64)
    parsed = tf.io.parse_example(serialized, features)
    labels = tf.cast(parsed[key_map.label] - key_map.label_offset, tf.int32)
    shapes = tf.stack([parsed[key_map.height], parsed[key_map.width]], axis=1) if has_size else None
    return parsed[key_map.encoded], labels, shapes


def read_records(
    source: SplitSource, mode: str, seed: int = 0, shard: Shard | None = None
) -> tf.data.Dataset:
    """One pass over the serialized records (this worker's share with a `shard`),
    checked against `source.records`.

    TRAIN shuffles the shard order each pass and interleaves non-deterministically;
    EVAL interleaves the sorted shards round-robin, the same order every time. Shared by
    record, TRAIN interleaves deterministically too, so that every worker reads the one
    stream its share is cut from. Shared by file, a worker's count is not known, and only
    the record stream's integrity is checked (by TFRecord's checksums).
    """
    training = mode == TRAIN
    deterministic = not training or (shard is not None and shard.by == BY_RECORD)
    compression = source.compression
    remapped = source.label_remaps is not None
    # With label remaps, each record comes with its file's index, for the remap.
    files = tf.data.Dataset.from_tensor_slices(
        (list(source.files), np.arange(len(source.files), dtype=np.int32))
        if remapped
        else list(source.files)
    )
    listed = len(source.files)
    if shard is not None and shard.by == BY_FILE:
        files = files.shard(shard.count, shard.index)
        listed = len(source.files[shard.index :: shard.count])
    if training:
        files = files.shuffle(listed, seed=seed, reshuffle_each_iteration=True)

    def read(path: tf.Tensor, index: tf.Tensor | None = None) -> tf.data.Dataset:
        dataset = tf.data.TFRecordDataset(path, compression, READ_BUFFER_BYTES)
        return dataset if index is None else dataset.map(lambda record: (record, index))

    records = files.interleave(
        read,
        cycle_length=min(listed, MAX_CYCLE_LENGTH),
        num_parallel_calls=tf.data.AUTOTUNE,
        deterministic=deterministic,
    )
    if source.records is not None and (shard is None or shard.by == BY_RECORD):
        records = records.apply(tf.data.experimental.assert_cardinality(source.records))
    if shard is not None and shard.by == BY_RECORD:
        records = records.shard(shard.count, shard.index)
    return records


def make_dataset(
    source: SplitSource,
    mode: str,
    *,
    image_size: int,
    batch_size: int,
    memory: MemoryPlan,
    crop_fraction: float = DEFAULT_CROP_FRACTION,
    key_map: FeatureKeyMap = DEFAULT_KEY_MAP,
    normalization: tuple[Sequence[float], Sequence[float]] | None = None,
    repeat: bool | None = None,
    seed: int = 0,
    shard: Shard | None = None,
) -> tf.data.Dataset:
    """The (images, labels) batches of one split (of this worker's share, with `shard`).

    Args:
      source: the shards and their recorded counts (see split_source).
      mode: TRAIN (shuffled, augmented, non-deterministic order, full batches only) or
        EVAL (file order, center crop, deterministic, last batch may be partial).
      image_size: output side in pixels.
      batch_size: the global batch size.
      memory: cache decision, shuffle buffer and autotune RAM budget (see plan_memory).
      crop_fraction: center crop of EVAL mode.
      key_map: the shards' feature layout.
      normalization: (mean, std) to normalize on the host to float32; None yields uint8
        and leaves normalization to the model's first layer.
      repeat: repeat forever; None repeats in TRAIN mode only.
      seed: seeds the shard-order and record shuffles.
      shard: this worker's share of the split (choose_shard); None reads all of it.
        `batch_size` stays the global batch: tf.distribute gives each step's replicas
        their parts of the batches of every worker's share.

    Returns:
      A dataset of (images [B, S, S, 3] uint8 or float32, labels [B] int32). A corrupt or
      truncated shard, or a count differing from `source.records`, fails the iteration:
      run it inside `read_errors.named_read_errors(source)` for an error naming the file.
    """
    if mode not in MODES:
        raise ValueError(f"mode must be one of {MODES}, got {mode!r}")
    training = mode == TRAIN
    if training and memory.decoded:
        raise ValueError("TRAIN images are augmented each pass: their decode cannot be cached")
    repeat = training if repeat is None else repeat
    records = _undecoded_records(source, mode, memory, key_map, repeat, seed, shard)
    decode = _decode(mode, image_size, crop_fraction, normalization)
    dataset = records.batch(batch_size, drop_remainder=training).map(
        decode, num_parallel_calls=tf.data.AUTOTUNE, deterministic=not training
    )
    if memory.decoded:
        dataset = dataset.cache()
        if repeat:
            dataset = dataset.repeat()
    return dataset.prefetch(tf.data.AUTOTUNE).with_options(_options(training, memory))


def _parsed_records(
    source: SplitSource, mode: str, key_map: FeatureKeyMap, seed: int, shard: Shard | None
) -> tf.data.Dataset:
    """read_records parsed: (encoded, label) per record, with its image's [height,
    width] when the key map has size features; the labels of a window's spans mapped to
    the model's (SplitSource.label_remaps)."""
    records = read_records(source, mode, seed, shard)
    remaps = (
        tf.constant(np.asarray(source.label_remaps, np.int32))
        if source.label_remaps is not None
        else None
    )

    @tf.autograph.experimental.do_not_convert
    def parse(serialized: tf.Tensor, file_index: tf.Tensor | None = None) -> tuple:
        encoded, labels, shapes = parse_batch(serialized, key_map)
        if remaps is not None:
            labels = tf.gather_nd(remaps, tf.stack([file_index, labels], axis=1))
        return (encoded, labels) if shapes is None else (encoded, labels, shapes)

    parsed = (
        records.batch(PARSE_BATCH)
        .map(parse, num_parallel_calls=tf.data.AUTOTUNE, deterministic=mode != TRAIN)
        .unbatch()
    )
    # unbatch forgets the count that Keras sizes an epoch by; read_records checked it.
    count = tf.get_static_value(records.cardinality())
    if count is not None and count >= 0:
        parsed = parsed.apply(tf.data.experimental.assert_cardinality(count))
    return parsed


def _undecoded_records(
    source: SplitSource,
    mode: str,
    memory: MemoryPlan,
    key_map: FeatureKeyMap,
    repeat: bool,
    seed: int,
    shard: Shard | None,
) -> tf.data.Dataset:
    """The parsed records make_dataset batches: cached and repeated here unless the plan
    caches the decoded batches, and shuffled in TRAIN mode."""
    training = mode == TRAIN
    records = _parsed_records(source, mode, key_map, seed, shard)
    if memory.cache and not memory.decoded:
        records = records.cache()
    if repeat and not memory.decoded:
        records = records.repeat()
    if training:
        records = records.shuffle(memory.shuffle_buffer, seed=seed, reshuffle_each_iteration=True)
    return records


def _decode(
    mode: str,
    image_size: int,
    crop_fraction: float,
    normalization: tuple[Sequence[float], Sequence[float]] | None,
) -> Callable[..., tuple[tf.Tensor, tf.Tensor]]:
    """The map from a batch of parsed records to (images, labels)."""

    # Written in graph ops (tf.cond, tf.while_loop) as the SavedModel's signatures trace
    # them: AutoGraph's conversion would only add seconds to every Trainer's start.
    @tf.autograph.experimental.do_not_convert
    def decode(
        encoded: tf.Tensor, labels: tf.Tensor, shapes: tf.Tensor | None = None
    ) -> tuple[tf.Tensor, tf.Tensor]:
        images = decode_batch(encoded, mode, image_size, crop_fraction, shapes)
        if normalization is not None:
            images = normalize(images, *normalization)
        return images, labels

    return decode


def _options(training: bool, memory: MemoryPlan) -> tf.data.Options:
    """Deterministic order outside TRAIN, autotune within the plan's RAM budget, and no
    auto-sharding."""
    options = tf.data.Options()
    options.deterministic = not training
    options.autotune.enabled = True
    options.autotune.ram_budget = int(memory.autotune_ram_budget)
    # The auto-shard rewrite would strip the assert_cardinality count check, and shard
    # after the decode; read_records takes a worker's share itself.
    options.experimental_distribute.auto_shard_policy = tf.data.experimental.AutoShardPolicy.OFF
    return options
