"""One statistics run, end to end: find the shards, run the Beam pipeline, read the
results back. Shared by the TFX executor and `imgpipe stats`.
"""

from __future__ import annotations

import dataclasses
import itertools
import os
import uuid
from collections.abc import Callable, Sequence

import apache_beam as beam

from imgpipe.components.common.formats import artifacts, conversion_summary, layout
from imgpipe.components.common.runtime import progress
from imgpipe.components.common.storage import fileio, stage_results
from imgpipe.components.image_statistics import transforms
from imgpipe.components.image_statistics.accumulator import SplitAccumulator
from imgpipe.components.image_statistics.analyze import AnalysisOptions
from imgpipe.components.image_statistics.transforms import DuplicateGroup

WORK_DIR_PREFIX = ".imgpipe-stats-"
# What the progress bar says is done to the records it counts.
ANALYSED = "analysed"
# The pipeline's stage results: each split's SplitAccumulator, keyed by split, and each
# duplicate bucket's groups, keyed by bucket.
SPLIT_STATISTICS: stage_results.ResultKind[SplitAccumulator] = stage_results.ResultKind(
    "stats", SplitAccumulator
)
DUPLICATE_GROUPS: stage_results.ResultKind[list[DuplicateGroup]] = stage_results.ResultKind(
    "groups", list
)


@dataclasses.dataclass
class StatisticsRun:
    splits: list[str]
    accumulators: dict[str, SplitAccumulator]
    groups: list[DuplicateGroup]


def split_order(splits: Sequence[str]) -> list[str]:
    """Train first, then the others sorted: the order the report and checks use."""
    if not splits:
        raise ValueError("the Examples have no splits")
    return sorted(splits, key=lambda name: (name != layout.TRAIN_SPLIT, name))


def build_pipeline(
    pipeline: beam.Pipeline,
    examples_uri: str,
    shards: Sequence[tuple[str, str]],
    options: AnalysisOptions,
    results_dir: str,
    progress_dir: str | None = None,
) -> None:
    """Writes each split's SplitAccumulator and the duplicate groups into results_dir,
    as stage results (SPLIT_STATISTICS, DUPLICATE_GROUPS).

    Args:
      shards: (split, path) of every shard to analyse.
      progress_dir: where the workers count the records they have analysed
        (runtime/progress.py); None for none.
    """
    verify_images = strict_check_needed(examples_uri, options)
    options_by_split = {
        split: dataclasses.replace(
            options,
            thumbnail_fraction=thumbnail_fraction(examples_uri, options.keep_thumbnails, split),
            verify_images=verify_images,
        )
        for split in sorted({split for split, _ in shards})
    }
    analyzed = (
        pipeline
        | "Read" >> transforms.ReadRecordBatches(list(shards))
        | "Analyze" >> transforms.AnalyzeBatches(options_by_split, progress_dir)
    )
    _ = (
        analyzed[transforms.STATS_TAG]
        | "CombineSplits" >> transforms.CombineSplits(options.keep_thumbnails)
        | "WriteStats" >> stage_results.WriteResults(results_dir, SPLIT_STATISTICS)
    )
    _ = (
        analyzed[transforms.KEYS_TAG]
        | "FindDuplicates" >> transforms.FindDuplicates(transforms.duplicate_buckets(len(shards)))
        | "WriteGroups" >> stage_results.WriteResults(results_dir, DUPLICATE_GROUPS)
    )


def strict_check_needed(examples_uri: str, options: AnalysisOptions) -> bool:
    """Whether the images get the strict JPEG check: asked for, and not done already by
    an ImageExampleGen that decoded every image it wrote (resize, re-encode, verify)."""
    summary = conversion_summary.read_if_present(examples_uri)
    return options.verify_images and not (summary is not None and summary.decoded_every_image)


# Thumbnail candidates per class, as a multiple of the thumbnails kept: with 4x, a
# class falls short of its thumbnails with a probability below 1e-7.
_THUMBNAIL_OVERSAMPLING = 4


def thumbnail_fraction(examples_uri: str, keep: int, split: str) -> float:
    """The hash fraction that still leaves every class of `split` enough thumbnail
    candidates.

    Uses ImageExampleGen's per-label counts; 1.0 (every image a candidate) without them.
    """
    summary = conversion_summary.read_if_present(examples_uri)
    if summary is None or split not in summary.splits:
        return 1.0
    counts = [n for n in summary.splits[split].labels.values() if n]
    if not counts or keep <= 0:
        return 1.0
    return min(1.0, _THUMBNAIL_OVERSAMPLING * keep / min(counts))


def run_statistics(
    examples_uri: str,
    splits: Sequence[str],
    work_parent: str,
    options: AnalysisOptions,
    make_pipeline: Callable[[], beam.Pipeline],
    progress_dir: str | None = None,
) -> StatisticsRun:
    """Computes the statistics of `splits` of `examples_uri`.

    Args:
      splits: the split names (the artifact's split_names).
      work_parent: a folder for the pipeline's intermediate files (removed after).
      make_pipeline: returns the Beam pipeline to run on (runner and options set).
      progress_dir: a local folder for a progress bar (runtime/progress.py): the records
        to analyse, when ImageExampleGen's summary counts them, are written there before
        the pipeline runs, and the workers count the records they have analysed; None
        for none.

    Raises:
      FileNotFoundError, ValueError: no splits, or a split without shards.
    """
    splits = split_order(splits)
    shards: list[tuple[str, str]] = []
    for split in splits:
        pattern = artifacts.split_shard_pattern(examples_uri, split)
        paths = fileio.glob(pattern)
        if not paths:
            raise FileNotFoundError(f"split {split!r} has no shards matching {pattern}")
        shards.extend((split, path) for path in paths)
    results_dir = os.path.join(work_parent, WORK_DIR_PREFIX + uuid.uuid4().hex)
    fileio.makedirs(results_dir)
    records = _records_written(examples_uri, splits)
    if records is not None:
        progress.write_total(progress_dir, records, ANALYSED)
    try:
        pipeline = make_pipeline()
        build_pipeline(pipeline, examples_uri, shards, options, results_dir, progress_dir)
        pipeline.run().wait_until_finish()
        combined = stage_results.read_results(results_dir, SPLIT_STATISTICS)
        groups = sorted(
            itertools.chain.from_iterable(
                stage_results.read_results(results_dir, DUPLICATE_GROUPS).values()
            ),
            key=lambda g: (g.kind, g.files, g.key),
        )
    finally:
        if fileio.exists(results_dir):
            fileio.remove(results_dir)
    # A split whose shards are all empty never reaches the combiner.
    accumulators = {split: combined.get(split, SplitAccumulator()) for split in splits}
    _check_record_counts(examples_uri, accumulators)
    return StatisticsRun(splits, accumulators, groups)


def _records_written(examples_uri: str, splits: Sequence[str]) -> int | None:
    """The records ImageExampleGen wrote into `splits`, from its summary; None without
    one (nothing else counts them without reading every shard)."""
    summary = conversion_summary.read_if_present(examples_uri)
    if summary is None or any(split not in summary.splits for split in splits):
        return None
    return sum(summary.splits[split].records for split in splits)


def _check_record_counts(examples_uri: str, accumulators: dict[str, SplitAccumulator]) -> None:
    """Records read must equal the records ImageExampleGen wrote, when it recorded them:
    a GZIP shard cut at a record boundary reads as a shorter, valid one."""
    summary = conversion_summary.read_if_present(examples_uri)
    if summary is None:
        return
    for split, accumulator in accumulators.items():
        if split not in summary.splits:
            continue
        read = accumulator.images + accumulator.failed
        written = summary.splits[split].records
        if read != written:
            raise artifacts.ShardReadError(
                f"{examples_uri} split {split!r}: read {read} records but ImageExampleGen "
                f"wrote {written}; a shard was truncated or replaced"
            )
