"""Beam transforms of ImageExampleGen: images in, sharded TFRecords out.

Memory stays flat however large the dataset: converted records never go through a
shuffle. `ConvertImages` spills each record to a per-bundle file in the work
directory and emits only a small pointer; `WriteShards` groups the pointers by shard,
reads that shard's records back and writes them in a seeded order. The largest thing
a worker holds is one shard.

Each shard's task also writes the shard's result row (counts, and the files skipped
among those that hashed to it) as a file named after the shard, so a retried task
overwrites its row, and the launcher reads the rows back without a sink: a
`WriteToText` measured about 0.25 s of a local run's fixed cost.
"""

from __future__ import annotations

import concurrent.futures
import dataclasses
import functools
import hashlib
import json
import math
import os
import time
import uuid
from collections.abc import Iterable, Iterator
from typing import IO

import apache_beam as beam
import tensorflow as tf

from imgpipe.components.common import allocator, artifacts, fileio, layout
from imgpipe.components.common.image_header import ImageHeaderError
from imgpipe.components.image_example_gen import splitting
from imgpipe.components.image_example_gen.examples import image_example
from imgpipe.components.image_example_gen.image_codec import ImageDecodeError, convert_image
from imgpipe.components.image_example_gen.options import ImageOptions

SKIPPED_TAG = "skipped"
# Images per pipeline element: one batch goes through a worker's thread pool at once.
CONVERT_BATCH = 32
RECORDS_TAG = "records"
RESULT_SUFFIX = ".result.json"
# Batches per task file. The plan reaches the workers as files, never inside the
# pipeline graph: a Create of every path is pickled and bz2-compressed on the launcher
# (measured 6.6 s per graph conversion at 100,000 images) and outgrows Dataflow's
# job-graph limit at a few million.
TASK_BATCHES_PER_FILE = 1024
TASK_FILE_PREFIX = "tasks"


@dataclasses.dataclass(frozen=True)
class ConversionTask:
    relpath: str
    label: str
    label_id: int
    split: str


@dataclasses.dataclass(frozen=True)
class RecordPointer:
    """Where one converted record was spilled, and what the summary needs of it."""

    split: str
    relpath: str
    label: str
    spill_path: str
    offset: int
    length: int
    bytes_in: int
    reencoded: bool


@dataclasses.dataclass(frozen=True)
class SkippedFile:
    split: str
    relpath: str
    reason: str


@dataclasses.dataclass(frozen=True)
class ShardResult:
    split: str
    shard: int
    num_shards: int
    records: int
    bytes_in: int
    bytes_out: int
    reencoded: int
    labels: tuple[tuple[str, int], ...]
    skipped: tuple[tuple[str, str], ...]  # (relpath, reason) of the files skipped here


class ImageConversionError(ValueError):
    """A bad image under on_error=fail; the message names the file and the reason."""


def shard_file_name(shard: int, num_shards: int, gzip: bool) -> str:
    suffix = layout.GZIP_SUFFIX if gzip else ""
    return f"{layout.SHARD_PREFIX}-{shard:05d}-of-{num_shards:05d}{suffix}"


@dataclasses.dataclass(frozen=True)
class _Converted:
    task: ConversionTask
    record: bytes | None = None
    bytes_in: int = 0
    reencoded: bool = False
    error: str | None = None


def convert_task(root: str, task: ConversionTask, options: ImageOptions) -> _Converted:
    """Reads and converts one image into its serialized Example, or the reason it can't be."""
    try:
        data = fileio.read_bytes(os.path.join(root, task.relpath))
        image, _ = convert_image(data, options)
    except (ImageHeaderError, ImageDecodeError) as e:
        return _Converted(task, error=str(e))
    except (OSError, tf.errors.OpError) as e:
        return _Converted(task, error=f"unreadable: {getattr(e, 'message', None) or e}")
    record = image_example(image, task.label_id, task.label, task.relpath,
                           hashlib.sha256(data).hexdigest())
    return _Converted(task, record, len(data), image.reencoded)


class ConvertImageFn(beam.DoFn):
    """Converts a batch of images; spills each serialized Example.

    When the options decode every image, a thread pool converts the batch: decoding,
    resizing and encoding release the GIL, so the threads use every core of a worker,
    on any runner. Pass-through converts inline: its work per image (read, header,
    hash, serialize) is mostly Python, and threads measured twice as slow as none.
    """

    def __init__(self, root: str, spill_dir: str, options: ImageOptions,
                 fail_on_error: bool, progress_dir: str | None = None, threads: int = 0):
        self._root = root
        self._spill_dir = spill_dir
        self._options = options
        self._fail_on_error = fail_on_error
        self._progress_dir = progress_dir
        self._threads = threads

    def setup(self) -> None:
        allocator.tune_malloc()
        self._progress = _ProgressFile(self._progress_dir)
        self._pool = None
        if self._options.decodes_every_image:
            self._pool = concurrent.futures.ThreadPoolExecutor(
                max_workers=self._threads or os.cpu_count() or 1)

    def teardown(self) -> None:
        if self._pool is not None:
            self._pool.shutdown()

    def start_bundle(self) -> None:
        self._spill: IO[bytes] | None = None
        self._spill_path = ""
        self._offset = 0

    def process(self, batch: list[ConversionTask]) -> Iterator:
        """Yields one list of RecordPointers for the batch, and each skipped file."""
        convert = functools.partial(convert_task, self._root, options=self._options)
        pointers = []
        for converted in (self._pool.map(convert, batch) if self._pool else map(convert, batch)):
            if converted.error is not None:
                yield from self._skip(converted.task, converted.error)
                continue
            record = converted.record
            assert record is not None  # every conversion without an error has one
            if self._spill is None:
                self._spill_path = os.path.join(self._spill_dir, f"{uuid.uuid4().hex}.spill")
                self._spill = fileio.open_file(self._spill_path, "wb")
            self._spill.write(record)
            self._progress.add(1)
            task = converted.task
            pointers.append(RecordPointer(
                task.split, task.relpath, task.label, self._spill_path, self._offset,
                len(record), converted.bytes_in, converted.reencoded))
            self._offset += len(record)
        if pointers:
            yield pointers

    def _skip(self, task: ConversionTask, reason: str) -> Iterator:
        if self._fail_on_error:
            raise ImageConversionError(f"{task.relpath}: {reason}")
        self._progress.add(1)
        yield beam.pvalue.TaggedOutput(SKIPPED_TAG,
                                       SkippedFile(task.split, task.relpath, reason))

    def finish_bundle(self) -> None:
        if self._spill is not None:
            self._spill.close()
            self._spill = None
        self._progress.flush()


class WriteShardFn(beam.DoFn):
    """Writes one shard from its pointers, in seeded order, and its result row.

    A shard that only skipped files hashed to is written empty, as every shard of
    the `-of-N` set must exist.
    """

    def __init__(self, output_dir: str, results_dir: str, gzip: bool, seed: int):
        self._output_dir = output_dir
        self._results_dir = results_dir
        self._gzip = gzip
        self._seed = seed

    def process(self, element: tuple[tuple[str, int, int],
                                     Iterable[list[RecordPointer] | SkippedFile]]
                ) -> Iterator[ShardResult]:
        (split, shard, num_shards), values = element
        pointers, skipped = [], []
        for value in values:
            if isinstance(value, SkippedFile):
                skipped.append((value.relpath, value.reason))
            else:
                pointers.extend(value)
        pointers.sort(key=lambda p: (p.spill_path, p.offset))
        records: list[tuple[int, str, bytes]] = []
        handle, handle_path = None, None
        try:
            for pointer in pointers:
                if pointer.spill_path != handle_path:
                    if handle is not None:
                        handle.close()
                    handle = fileio.open_file(pointer.spill_path, "rb")
                    handle_path = pointer.spill_path
                assert handle is not None
                handle.seek(pointer.offset)
                record = handle.read(pointer.length)
                key = splitting.order_key(pointer.relpath, self._seed)
                records.append((key, pointer.relpath, record))
        finally:
            if handle is not None:
                handle.close()
        records.sort(key=lambda r: (r[0], r[1]))
        split_dir = artifacts.split_dir(self._output_dir, split)
        tf.io.gfile.makedirs(split_dir)
        path = os.path.join(split_dir, shard_file_name(shard, num_shards, self._gzip))
        write_tfrecord(path, (r[2] for r in records), self._gzip)
        labels: dict[str, int] = {}
        for pointer in pointers:
            labels[pointer.label] = labels.get(pointer.label, 0) + 1
        result = ShardResult(
            split, shard, num_shards, len(pointers),
            sum(p.bytes_in for p in pointers), sum(p.length for p in pointers),
            sum(p.reencoded for p in pointers), tuple(sorted(labels.items())),
            tuple(sorted(skipped)))
        artifacts.write_json(os.path.join(self._results_dir, result_file_name(split, shard)),
                             dataclasses.asdict(result))
        yield result


def result_file_name(split: str, shard: int) -> str:
    return f"{split}-{shard:05d}{RESULT_SUFFIX}"


def read_shard_results(results_dir: str) -> list[ShardResult]:
    """The result rows WriteShards wrote into `results_dir`, in (split, shard) order."""
    results = []
    for path in sorted(tf.io.gfile.glob(os.path.join(results_dir, "*" + RESULT_SUFFIX))):
        row = artifacts.read_json(path)
        results.append(ShardResult(**{
            **row,
            "labels": tuple((label, count) for label, count in row["labels"]),
            "skipped": tuple((relpath, reason) for relpath, reason in row["skipped"])}))
    return sorted(results, key=lambda r: (r.split, r.shard))


def write_tfrecord(path: str, records: Iterable[bytes], gzip: bool) -> None:
    options = tf.io.TFRecordOptions(compression_type="GZIP" if gzip else "")
    with tf.io.TFRecordWriter(path, options) as writer:
        for record in records:
            writer.write(record)


@beam.ptransform_fn
def ConvertImages(  # noqa: N802 - Beam transforms are named like classes
    task_batches: beam.PCollection,
    root: str,
    spill_dir: str,
    options: ImageOptions,
    fail_on_error: bool,
    progress_dir: str | None = None,
) -> beam.pvalue.DoOutputsTuple:
    """Converts batches of ConversionTasks.

    Elements are batches, not images, because Beam's per-element cost (about 0.5 ms
    in-process, measured) would otherwise exceed the cost of storing an image.

    Returns:
      A tuple with RECORDS_TAG (one list of RecordPointer per batch) and SKIPPED_TAG
      (one SkippedFile per bad file).
    """
    return task_batches | "Convert" >> beam.ParDo(
        ConvertImageFn(root, spill_dir, options, fail_on_error, progress_dir)
    ).with_outputs(SKIPPED_TAG, main=RECORDS_TAG)


def batch_tasks(tasks: list[ConversionTask], size: int = CONVERT_BATCH
                ) -> list[list[ConversionTask]]:
    return [tasks[i:i + size] for i in range(0, len(tasks), size)]


def task_batch_to_json(batch: list[ConversionTask]) -> str:
    return json.dumps([[t.relpath, t.label, t.label_id, t.split] for t in batch])


def task_batch_from_json(line: str) -> list[ConversionTask]:
    return [ConversionTask(relpath, label, int(label_id), split)
            for relpath, label, label_id, split in json.loads(line)]


def write_task_files(tasks: list[ConversionTask], directory: str,
                     batch_size: int = CONVERT_BATCH,
                     batches_per_file: int = TASK_BATCHES_PER_FILE) -> str:
    """Writes the conversion plan as JSON lines, one batch of tasks a line.

    Returns:
      The glob pattern of the files, for ReadTaskBatches.
    """
    batches = batch_tasks(tasks, batch_size)
    num_files = max(1, math.ceil(len(batches) / batches_per_file))
    tf.io.gfile.makedirs(directory)
    for index in range(num_files):
        lines = batches[index * batches_per_file:(index + 1) * batches_per_file]
        name = f"{TASK_FILE_PREFIX}-{index:05d}-of-{num_files:05d}.jsonl"
        with fileio.open_file(os.path.join(directory, name), "w") as f:
            f.write("".join(task_batch_to_json(batch) + "\n" for batch in lines))
    return os.path.join(directory, f"{TASK_FILE_PREFIX}-*.jsonl")


@beam.ptransform_fn
def ReadTaskBatches(pbegin: beam.pvalue.PBegin, pattern: str) -> beam.PCollection:  # noqa: N802
    """The batches of ConversionTask that write_task_files wrote; runners split the
    files among workers like any text input."""
    return (pbegin
            | "ReadLines" >> beam.io.ReadFromText(pattern)
            | "Parse" >> beam.Map(task_batch_from_json))


def shards_for_bytes(total_bytes: int, shard_mb: float) -> int:
    return max(1, math.ceil(total_bytes / (shard_mb * 1024 * 1024)))


def _shard_key(split: str, relpath: str, num_shards: int | None,
               shard_counts: dict[str, int] | None) -> tuple[str, int, int]:
    """(split, shard, shards in split): a fixed count, or per split (1 for a split that
    has no records, only skipped files)."""
    count = num_shards or (shard_counts or {}).get(split, 1)
    return split, splitting.shard_of(relpath, count), count


def _group_by_shard(pointers: list[RecordPointer], num_shards: int | None = None,
                    shard_counts: dict[str, int] | None = None
                    ) -> Iterator[tuple[tuple[str, int, int], list[RecordPointer]]]:
    """Keys a batch's pointers by shard."""
    groups: dict[tuple[str, int, int], list[RecordPointer]] = {}
    for pointer in pointers:
        key = _shard_key(pointer.split, pointer.relpath, num_shards, shard_counts)
        groups.setdefault(key, []).append(pointer)
    yield from groups.items()


def _key_skipped(skipped: SkippedFile, num_shards: int | None = None,
                 shard_counts: dict[str, int] | None = None
                 ) -> tuple[tuple[str, int, int], SkippedFile]:
    return _shard_key(skipped.split, skipped.relpath, num_shards, shard_counts), skipped


@beam.ptransform_fn
@beam.typehints.with_output_types(ShardResult)
def WriteShards(  # noqa: N802
    converted: tuple[beam.PCollection, beam.PCollection],
    output_dir: str,
    results_dir: str,
    num_shards: int | None,
    shard_mb: float,
    gzip: bool,
    seed: int,
) -> beam.PCollection:
    """Groups records into shards (a fixed count, or sized by shard_mb) and writes them,
    each with its result row in `results_dir` (see `read_shard_results`).

    Takes ConvertImages' two outputs: the lists of RecordPointer, and the SkippedFiles,
    which go to the result row of the shard their path hashes to.
    """
    pointer_lists, skipped = converted
    if num_shards is not None:
        keyed = pointer_lists | "KeyByShard" >> beam.FlatMap(_group_by_shard, num_shards)
        keyed_skipped = skipped | "KeySkipped" >> beam.Map(_key_skipped, num_shards)
    else:
        shard_counts = (
            pointer_lists
            | "BytesBySplit" >> beam.FlatMap(lambda pointers: [(p.split, p.length)
                                                               for p in pointers])
            | "SumBytes" >> beam.CombinePerKey(sum)
            | "ShardCount" >> beam.MapTuple(lambda split, total: (
                split, shards_for_bytes(total, shard_mb))))
        keyed = pointer_lists | "KeyByShard" >> beam.FlatMap(
            _group_by_shard, shard_counts=beam.pvalue.AsDict(shard_counts))
        keyed_skipped = skipped | "KeySkipped" >> beam.Map(
            _key_skipped, shard_counts=beam.pvalue.AsDict(shard_counts))
    return ((keyed, keyed_skipped)
            | "PointersAndSkipped" >> beam.Flatten()
            | "GroupByShard" >> beam.GroupByKey()
            | "WriteShard" >> beam.ParDo(WriteShardFn(output_dir, results_dir, gzip, seed)))


class _ProgressFile:
    """Counts converted files into a small local file that the CLI's progress bar sums.

    Only used by local runs (progress_dir is None otherwise); a remote worker never
    writes one.
    """

    def __init__(self, progress_dir: str | None):
        self._path = None
        if progress_dir:
            self._path = os.path.join(progress_dir, f"{os.getpid()}-{uuid.uuid4().hex}")
        self._count = 0
        self._last_write = 0.0

    def add(self, n: int) -> None:
        self._count += n
        if self._path and time.monotonic() - self._last_write > 0.3:
            self.flush()

    def flush(self) -> None:
        if self._path:
            tmp = self._path + ".tmp"
            with open(tmp, "w") as f:
                f.write(str(self._count))
            os.replace(tmp, self._path)
            self._last_write = time.monotonic()
