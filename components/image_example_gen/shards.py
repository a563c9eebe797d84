"""Writing ImageExampleGen's shards: pointers to spilled records grouped by shard, each
shard written in a seeded order, and its result row (ShardResult).

Memory stays flat however large the dataset: converted records never go through a
shuffle, only pointers to them do. The largest thing a worker holds is one shard.

Each shard's task also writes the shard's result row (counts, the file's size and
CRC-32C for the manifest, and the files skipped among those that hashed to it) as a
stage result (SHARD_RESULTS, see common/storage/stage_results.py), which the launcher
reads back with `read_shard_results`.

Shards are written here rather than by tf.io.TFRecordWriter so that their checksum is
computed while they are written, not by reading them again (from an object store, that
would be a second transfer of the whole output). So are uncompressed shards' DALI index
files (layout.DALI_INDEX_DIR): the record offsets are taken as the shard is written.
"""

from __future__ import annotations

import dataclasses
import gzip as gzip_lib
import math
import os
import struct
from collections.abc import Iterable, Iterator

import apache_beam as beam
import google_crc32c

from imgpipe.components.common.formats import artifacts, layout, manifest
from imgpipe.components.common.runtime import phases
from imgpipe.components.common.storage import fileio, stage_results
from imgpipe.components.image_example_gen import splitting

# TFRecord's CRC mask (tensorflow/core/lib/hash/crc32c.h).
_CRC_MASK_DELTA = 0xA282EAD8
# zlib's default level, which TensorFlow's GZIP record writer uses too.
_GZIP_LEVEL = 6


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
    sha256: str  # of the source bytes
    rotated: bool = False  # stored upright by its EXIF orientation
    composited: bool = False  # its transparency composited onto the background


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
    file_size: int  # bytes of the shard file
    crc32c: str  # of the shard file, for the manifest
    index_size: int | None = None  # bytes of the shard's DALI index file, if written
    index_crc32c: str | None = None
    rotated: int = 0
    composited: int = 0

    @property
    def result_key(self) -> str:
        """The key of its stage result: one per shard, so a retried task overwrites it."""
        return f"{self.split}-{self.shard:05d}"

    @property
    def manifest_entry(self) -> manifest.FileEntry:
        return manifest.FileEntry(self.file_size, self.crc32c, self.records)

    @property
    def index_manifest_entry(self) -> manifest.FileEntry | None:
        if self.index_size is None or self.index_crc32c is None:
            return None
        return manifest.FileEntry(self.index_size, self.index_crc32c)


SHARD_RESULTS: stage_results.ResultKind[ShardResult] = stage_results.ResultKind(
    "shard", ShardResult
)


@dataclasses.dataclass(frozen=True)
class WrittenShard:
    """The manifest entries of a shard and of its DALI index file (None if not written)."""

    shard: manifest.FileEntry
    index: manifest.FileEntry | None = None


def shard_file_name(shard: int, num_shards: int, gzip: bool) -> str:
    suffix = layout.GZIP_SUFFIX if gzip else ""
    return f"{layout.SHARD_PREFIX}-{shard:05d}-of-{num_shards:05d}{suffix}"


def shard_paths(
    output_dir: str, split: str, shard: int, num_shards: int, gzip: bool, dali_index: bool
) -> tuple[str, str | None]:
    """A shard's path in `output_dir` and its DALI index file's (None: not written)."""
    path = os.path.join(
        artifacts.split_dir(output_dir, split), shard_file_name(shard, num_shards, gzip)
    )
    return path, artifacts.dali_index_path(output_dir, split, path) if dali_index else None


class WriteShardFn(beam.DoFn):
    """Writes one shard from its pointers, in seeded order, then its result row into
    `results_dir` (SHARD_RESULTS).

    A shard that only skipped files hashed to is written empty, as every shard of
    the `-of-N` set must exist. With `dali_index` (uncompressed shards only), the
    shard's DALI index file is written too. A retried task writes the same shard and
    row again, replacing its own.
    """

    def __init__(
        self, output_dir: str, results_dir: str, gzip: bool, seed: int, dali_index: bool = False
    ):
        if gzip and dali_index:
            raise ValueError("DALI cannot index GZIP shards: write them uncompressed")
        self._output_dir = output_dir
        self._results_dir = results_dir
        self._gzip = gzip
        self._seed = seed
        self._dali_index = dali_index

    def process(
        self, element: tuple[tuple[str, int, int], Iterable[list[RecordPointer] | SkippedFile]]
    ) -> None:
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
        # The launcher made the split folders: a task still running after its run was
        # stopped and cleaned up must not make them again.
        path, index_path = shard_paths(
            self._output_dir, split, shard, num_shards, self._gzip, self._dali_index
        )
        written = write_tfrecord(path, (r[2] for r in records), self._gzip, index_path)
        phases.reached(phases.WRITING)
        labels: dict[str, int] = {}
        for pointer in pointers:
            labels[pointer.label] = labels.get(pointer.label, 0) + 1
        result = ShardResult(
            split,
            shard,
            num_shards,
            len(pointers),
            sum(p.bytes_in for p in pointers),
            sum(p.length for p in pointers),
            sum(p.reencoded for p in pointers),
            tuple(sorted(labels.items())),
            tuple(sorted(skipped)),
            written.shard.size,
            written.shard.crc32c,
            written.index.size if written.index is not None else None,
            written.index.crc32c if written.index is not None else None,
            sum(p.rotated for p in pointers),
            sum(p.composited for p in pointers),
        )
        stage_results.write_result(self._results_dir, SHARD_RESULTS, result.result_key, result)


def read_shard_results(results_dir: str) -> list[ShardResult]:
    """The SHARD_RESULTS written into `results_dir`, in (split, shard) order."""
    results = stage_results.read_results(results_dir, SHARD_RESULTS).values()
    return sorted(results, key=lambda r: (r.split, r.shard))


def _masked_crc(data: bytes) -> bytes:
    crc = google_crc32c.value(data)
    return struct.pack("<I", (((crc >> 15) | (crc << 17)) + _CRC_MASK_DELTA) & 0xFFFFFFFF)


class _ChecksummedFile:
    """A writable file that also feeds what it writes to a Checksum."""

    def __init__(self, file, checksum: manifest.Checksum):
        self._file = file
        self._checksum = checksum

    def write(self, data: bytes) -> int:
        self._file.write(data)
        self._checksum.update(data)
        return len(data)

    def flush(self) -> None:
        self._file.flush()


def write_tfrecord(
    path: str, records: Iterable[bytes], gzip: bool, index_path: str | None = None
) -> WrittenShard:
    """Writes a TFRecord file, GZIP-compressed or not, and, at `index_path`, its DALI
    index; returns their manifest entries, computed while writing.

    The framing is TFRecord's: for each record, its length (uint64, little-endian) and
    that length's masked CRC-32C, then the bytes and their masked CRC-32C. The index is
    DALI's (its tfrecord2idx): a line `offset size` per record, in bytes of the file.

    Raises:
      ValueError: an index was asked for a GZIP file, which DALI cannot index.
    """
    if gzip and index_path is not None:
        raise ValueError(f"{path}: DALI cannot index a GZIP TFRecord file")
    checksum = manifest.Checksum()
    offsets: list[int] | None = [] if index_path is not None else None
    count = 0
    with fileio.open_file(path, "wb") as file:
        sink = _ChecksummedFile(file, checksum)
        compressor = (
            gzip_lib.GzipFile(
                filename="", mode="wb", compresslevel=_GZIP_LEVEL, fileobj=sink, mtime=0
            )
            if gzip
            else None
        )
        out = sink if compressor is None else compressor
        for record in records:
            if offsets is not None:
                offsets.append(checksum.size)
            length = struct.pack("<Q", len(record))
            out.write(length + _masked_crc(length))
            out.write(record)
            out.write(_masked_crc(record))
            count += 1
        if compressor is not None:
            compressor.close()  # the GZIP trailer; the file itself stays open
    shard = checksum.entry(count)
    if index_path is None or offsets is None:
        return WrittenShard(shard)
    index = dali_index(offsets, shard.size)
    with fileio.open_file(index_path, "wb") as file:
        file.write(index)
    return WrittenShard(shard, manifest.entry_of(index))


def dali_index(offsets: list[int], file_size: int) -> bytes:
    """DALI's TFRecord index of a file whose records start at `offsets`."""
    ends = offsets[1:] + [file_size] if offsets else []
    lines = (f"{start} {end - start}\n" for start, end in zip(offsets, ends, strict=True))
    return "".join(lines).encode()


def shards_for_bytes(total_bytes: int, shard_mb: float) -> int:
    return max(1, math.ceil(total_bytes / (shard_mb * 1024 * 1024)))


def _shard_key(
    split: str, relpath: str, num_shards: int | None, shard_counts: dict[str, int] | None
) -> tuple[str, int, int]:
    """(split, shard, shards in split): a fixed count, or per split (1 for a split that
    has no records, only skipped files)."""
    count = num_shards or (shard_counts or {}).get(split, 1)
    return split, splitting.shard_of(relpath, count), count


def _group_by_shard(
    pointers: list[RecordPointer],
    num_shards: int | None = None,
    shard_counts: dict[str, int] | None = None,
) -> Iterator[tuple[tuple[str, int, int], list[RecordPointer]]]:
    """Keys a batch's pointers by shard."""
    groups: dict[tuple[str, int, int], list[RecordPointer]] = {}
    for pointer in pointers:
        key = _shard_key(pointer.split, pointer.relpath, num_shards, shard_counts)
        groups.setdefault(key, []).append(pointer)
    yield from groups.items()


def _key_skipped(
    skipped: SkippedFile, num_shards: int | None = None, shard_counts: dict[str, int] | None = None
) -> tuple[tuple[str, int, int], SkippedFile]:
    return _shard_key(skipped.split, skipped.relpath, num_shards, shard_counts), skipped


@beam.ptransform_fn
def WriteShards(  # noqa: N802
    converted: tuple[beam.PCollection, beam.PCollection],
    output_dir: str,
    results_dir: str,
    num_shards: int | None,
    shard_mb: float,
    gzip: bool,
    seed: int,
    dali_index: bool = False,
) -> beam.PCollection:
    """Groups records into shards (a fixed count, or sized by shard_mb) and writes them,
    each with its DALI index file if `dali_index`, and each shard's result row into
    `results_dir` (SHARD_RESULTS; the folder must exist).

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
            | "BytesBySplit"
            >> beam.FlatMap(lambda pointers: [(p.split, p.length) for p in pointers])
            | "SumBytes" >> beam.CombinePerKey(sum)
            | "ShardCount"
            >> beam.MapTuple(lambda split, total: (split, shards_for_bytes(total, shard_mb)))
        )
        keyed = pointer_lists | "KeyByShard" >> beam.FlatMap(
            _group_by_shard, shard_counts=beam.pvalue.AsDict(shard_counts)
        )
        keyed_skipped = skipped | "KeySkipped" >> beam.Map(
            _key_skipped, shard_counts=beam.pvalue.AsDict(shard_counts)
        )
    return (
        (keyed, keyed_skipped)
        | "PointersAndSkipped" >> beam.Flatten()
        | "GroupByShard" >> beam.GroupByKey()
        | "WriteShard" >> beam.ParDo(WriteShardFn(output_dir, results_dir, gzip, seed, dali_index))
    )
