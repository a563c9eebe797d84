"""Beam transforms of ImageStatistics: Examples shards in, per-split accumulators and
duplicate groups out.

Pixels are reduced per batch on the workers; only accumulators (a few kB each) and one
small key per image (for the duplicate search, a GroupByKey on the hash) travel.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Iterable, Iterator

import apache_beam as beam
from apache_beam.io.filesystem import CompressionTypes

from components.common import allocator
from components.image_statistics.accumulator import ImageStatsCombineFn, SplitAccumulator
from components.image_statistics.analyze import (
    AnalysisOptions,
    BatchDecoder,
    ImageKey,
    analyze_batch,
)

KEYS_TAG = "keys"
STATS_TAG = "stats"
MIN_BATCH = 16
# Large batches keep the decoder busy: each batch decodes its first chunk alone.
MAX_BATCH = 256
# A group's file list stops here; its size and per-split counts are still complete.
MAX_GROUP_MEMBERS = 50


@dataclasses.dataclass(frozen=True)
class DuplicateGroup:
    """Images with the same content hash (exact) or the same dHash (near)."""

    kind: str  # "exact" or "near"
    key: str
    files: tuple[tuple[str, str], ...]  # (split, path), sorted; at most MAX_GROUP_MEMBERS
    size: int
    split_counts: tuple[tuple[str, int], ...]  # images of the group in each split


class AnalyzeBatchFn(beam.DoFn):
    def __init__(self, split: str, options: AnalysisOptions):
        self._split = split
        self._options = options
        self._decoder = BatchDecoder(options.image_size, options.crop_fraction)

    def setup(self) -> None:
        allocator.tune_malloc()

    def process(self, records: list[bytes]) -> Iterator:
        accumulator, keys = analyze_batch(records, self._split, self._decoder, self._options)
        yield self._split, accumulator
        for key in keys:
            yield beam.pvalue.TaggedOutput(KEYS_TAG, key)


@beam.ptransform_fn
@beam.typehints.with_input_types(bytes)
def AnalyzeSplit(  # noqa: N802 - Beam transforms are named like classes
    records: beam.PCollection, split: str, options: AnalysisOptions
) -> beam.pvalue.DoOutputsTuple:
    """Serialized Examples of one split -> STATS_TAG (split, accumulator), KEYS_TAG ImageKey."""
    return (records
            | "Batch" >> beam.BatchElements(min_batch_size=MIN_BATCH, max_batch_size=MAX_BATCH)
            | "Analyze" >> beam.ParDo(AnalyzeBatchFn(split, options)).with_outputs(
                KEYS_TAG, main=STATS_TAG))


@beam.ptransform_fn
def ReadSplit(  # noqa: N802
    pipeline: beam.Pipeline, file_pattern: str
) -> beam.PCollection:
    """Serialized records of one split; shards ending in .gz are read as GZIP."""
    return pipeline | beam.io.ReadFromTFRecord(
        file_pattern, compression_type=CompressionTypes.AUTO)


@beam.ptransform_fn
@beam.typehints.with_output_types(tuple[str, SplitAccumulator])
def CombineSplits(  # noqa: N802
    partials: beam.PCollection, keep_thumbnails: int
) -> beam.PCollection:
    return partials | beam.CombinePerKey(ImageStatsCombineFn(keep_thumbnails))


def _groups(kind: str, key: str, members: Iterable[tuple[str, str, str]]
            ) -> Iterator[DuplicateGroup]:
    members = sorted(set(members))
    if kind == "exact":
        duplicate = len(members) > 1
    else:  # near: the same look, but more than one distinct content
        duplicate = len({sha for _, _, sha in members}) > 1
    if duplicate:
        files = tuple((split, path) for split, path, _ in members[:MAX_GROUP_MEMBERS])
        counts: dict[str, int] = {}
        for split, _, _ in members:
            counts[split] = counts.get(split, 0) + 1
        yield DuplicateGroup(kind, key, files, len(members), tuple(sorted(counts.items())))


@beam.ptransform_fn
@beam.typehints.with_input_types(ImageKey)
@beam.typehints.with_output_types(DuplicateGroup)
def FindDuplicates(  # noqa: N802
    keys: beam.PCollection, near: bool = True
) -> beam.PCollection:
    """Exact duplicates by content hash and, with `near`, near-duplicates by equal dHash,
    within and across splits."""
    exact = (keys
             | "BySha" >> beam.Map(lambda k: (k.sha256, (k.split, k.path, k.sha256)))
             | "GroupSha" >> beam.GroupByKey()
             | "ExactGroups" >> beam.FlatMapTuple(lambda key, m: _groups("exact", key, m)))
    if not near:
        return exact
    similar = (keys
               | "ByDhash" >> beam.Map(lambda k: (f"{k.dhash:016x}", (k.split, k.path, k.sha256)))
               | "GroupDhash" >> beam.GroupByKey()
               | "NearGroups" >> beam.FlatMapTuple(lambda key, m: _groups("near", key, m)))
    return (exact, similar) | "AllGroups" >> beam.Flatten()
