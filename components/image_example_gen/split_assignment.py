"""Splits decided by content, and label conflicts found, inside the conversion's Beam
pipeline: between converting the images and writing the shards.

A content split key (the SHA-256 of the image bytes) is known only once a file has been
read, so it cannot be decided at listing as a path key is. The records stay where
ConvertImages spilled them; only small metadata moves:

1. Each batch's (content hash, label, path) triples are grouped into buckets of
   content hashes, where all copies of an image meet. Byte-identical images filed
   under different labels are label conflicts.
2. With stratify, each label's distinct content hashes are grouped by label and ranked
   into the label's cut points (splitting.cut_points): one number per split.
3. Each batch of record pointers gets its split from those cut points, a side input
   of labels x splits numbers (without stratify: from its content hash alone). A
   pointer whose split is already decided (a split layout, or split_by path) keeps it.
   Copies in a label conflict are skipped, with the conflict as the reason, unless
   on_label_conflict is keep.

Cost: two groupings of these triples (about 100 bytes an image), no second read of
any file, and no shuffle of the records.
"""

from __future__ import annotations

import dataclasses
import math
import os
from collections.abc import Iterable, Iterator

import apache_beam as beam

from imgpipe.components.common import artifacts
from imgpipe.components.common.conversion_summary import LabelConflict
from imgpipe.components.image_example_gen import splitting
from imgpipe.components.image_example_gen.options import (
    LABEL_CONFLICT_FAIL,
    LABEL_CONFLICT_KEEP,
    OutputOptions,
)
from imgpipe.components.image_example_gen.shards import RecordPointer, SkippedFile
from imgpipe.components.image_example_gen.tasks import UNDECIDED_SPLIT
from imgpipe.components.image_example_gen.transforms import ImageConversionError

# Images whose content keys share one bucket of the conflict search: about 10 MB of keys.
IMAGES_PER_CONTENT_BUCKET = 100_000
LABEL_CONFLICTS_FILE = "label_conflicts.json"

_CONFLICTS_TAG = "conflicts"
_SKIPPED_TAG = "skipped"


def content_buckets(num_images: int) -> int:
    """How many buckets the conflict search of `num_images` images uses."""
    return max(1, math.ceil(num_images / IMAGES_PER_CONTENT_BUCKET))


def _bucket_of(sha256: str, num_buckets: int) -> int:
    return int(sha256[:15], 16) % num_buckets


def _content_keys(
    pointers: list[RecordPointer], num_buckets: int
) -> Iterator[tuple[int, list[tuple[str, str, str]]]]:
    """A batch's (sha256, label, relpath) triples, by bucket: few elements per batch."""
    buckets: dict[int, list[tuple[str, str, str]]] = {}
    for p in pointers:
        buckets.setdefault(_bucket_of(p.sha256, num_buckets), []).append(
            (p.sha256, p.label, p.relpath)
        )
    yield from buckets.items()


class FindConflictsFn(beam.DoFn):
    """One bucket's label conflicts, and (for a stratified content split) each label's
    split hashes of the contents it ranks."""

    def __init__(self, keep: bool, fail: bool, rank: bool):
        self._keep = keep
        self._fail = fail
        self._rank = rank

    def process(self, element: tuple[int, Iterable[list[tuple[str, str, str]]]]) -> Iterator:
        """Yields the conflicts (tagged) and (label, split hashes) to rank."""
        _, batches = element
        by_content: dict[str, list[tuple[str, str]]] = {}
        for batch in batches:
            for sha256, label, relpath in batch:
                by_content.setdefault(sha256, []).append((label, relpath))
        hashes_by_label: dict[str, list[int]] = {}
        for sha256, copies in sorted(by_content.items()):
            labels = sorted({label for label, _ in copies})
            if len(labels) > 1:
                conflict = LabelConflict(
                    sha256, tuple(labels), tuple(sorted(path for _, path in copies)), self._keep
                )
                if self._fail:
                    raise ImageConversionError(
                        f"{conflict.reason} (on_label_conflict fail; keep or skip them instead)"
                    )
                yield beam.pvalue.TaggedOutput(_CONFLICTS_TAG, conflict)
                if not self._keep:
                    continue
            if self._rank:
                # A kept conflict is ranked under its first label, so its copies share a split.
                hashes_by_label.setdefault(labels[0], []).append(splitting.split_hash(sha256))
        yield from hashes_by_label.items()


class AssignSplitFn(beam.DoFn):
    """Gives each pointer of a batch its split; skips the copies of a label conflict."""

    def __init__(self, options: OutputOptions, fallback_split: str):
        self._splits = options.splits
        self._names = [name for name, _ in options.splits]
        self._stratify = options.stratify
        self._keep = options.on_label_conflict == LABEL_CONFLICT_KEEP
        self._fallback = fallback_split

    def process(
        self,
        pointers: list[RecordPointer],
        cuts_by_label: dict[str, splitting.CutPoints],
        conflicts: dict[str, LabelConflict],
    ) -> Iterator:
        """Yields the batch's kept pointers, with their splits, and skipped copies (tagged)."""
        kept = []
        for pointer in pointers:
            conflict = conflicts.get(pointer.sha256)
            split = pointer.split or self._decide(pointer, conflict, cuts_by_label)
            if conflict is not None and not self._keep:
                skipped = SkippedFile(split, pointer.relpath, conflict.reason)
                yield beam.pvalue.TaggedOutput(_SKIPPED_TAG, skipped)
                continue
            kept.append(dataclasses.replace(pointer, split=split))
        if kept:
            yield kept

    def _decide(
        self,
        pointer: RecordPointer,
        conflict: LabelConflict | None,
        cuts_by_label: dict[str, splitting.CutPoints],
    ) -> str:
        if not self._stratify:
            return splitting.hash_split(pointer.sha256, self._splits)
        if conflict is not None and not self._keep:
            return self._fallback
        label = conflict.labels[0] if conflict is not None else pointer.label
        cuts = cuts_by_label[label]
        return splitting.split_at(splitting.split_hash(pointer.sha256), cuts, self._names)


def _write_conflicts(conflicts: list[LabelConflict], results_dir: str) -> None:
    rows = [dataclasses.asdict(c) for c in sorted(conflicts, key=lambda c: c.paths)]
    artifacts.write_json(os.path.join(results_dir, LABEL_CONFLICTS_FILE), rows)


def read_conflicts(results_dir: str) -> list[LabelConflict]:
    """The label conflicts AssignSplits wrote into `results_dir`, by first path."""
    return [
        LabelConflict(row["sha256"], tuple(row["labels"]), tuple(row["paths"]), row["kept"])
        for row in artifacts.read_json(os.path.join(results_dir, LABEL_CONFLICTS_FILE))
    ]


@beam.ptransform_fn
def AssignSplits(  # noqa: N802 - Beam transforms are named like classes
    converted: tuple[beam.PCollection, beam.PCollection],
    options: OutputOptions,
    by_content: bool,
    num_images: int,
    results_dir: str,
) -> tuple[beam.PCollection, beam.PCollection]:
    """Decides undecided splits by content and finds label conflicts.

    Args:
      converted: ConvertImages' lists of RecordPointer and its SkippedFiles.
      options: stratify, the splits and on_label_conflict.
      by_content: the splits are decided here (a flat layout with split_by content);
        otherwise every pointer's split was decided at listing.
      num_images: the images planned, to size the conflict search.
      results_dir: where the label conflicts are written (see read_conflicts).

    Returns:
      The lists of RecordPointer, each with its split, and every SkippedFile: those
      of the conversion and the copies of skipped label conflicts.
    """
    pointer_lists, skipped = converted
    fallback = options.splits[0][0]
    rank = by_content and options.stratify
    found = (
        pointer_lists
        | "ContentKeys" >> beam.FlatMap(_content_keys, content_buckets(num_images))
        | "GroupByContent" >> beam.GroupByKey()
        | "FindConflicts"
        >> beam.ParDo(
            FindConflictsFn(
                options.on_label_conflict == LABEL_CONFLICT_KEEP,
                options.on_label_conflict == LABEL_CONFLICT_FAIL,
                rank,
            )
        ).with_outputs(_CONFLICTS_TAG, main="hashes")
    )
    conflicts = found[_CONFLICTS_TAG]
    _ = (
        conflicts
        | "AllConflicts" >> beam.combiners.ToList()
        | "WriteConflicts" >> beam.Map(_write_conflicts, results_dir)
    )
    weights = [w for _, w in options.splits]
    cuts = (
        found["hashes"]
        | "GroupByLabel" >> beam.GroupByKey()
        | "CutPoints"
        >> beam.MapTuple(
            lambda label, lists: (
                label,
                splitting.cut_points((h for hashes in lists for h in hashes), weights),
            )
        )
    )
    assigned = pointer_lists | "Assign" >> beam.ParDo(
        AssignSplitFn(options, fallback),
        beam.pvalue.AsDict(cuts),
        beam.pvalue.AsDict(conflicts | "ByContent" >> beam.Map(lambda c: (c.sha256, c))),
    ).with_outputs(_SKIPPED_TAG, main="pointers")
    converted_skipped = skipped | "FallbackSplit" >> beam.Map(
        lambda s: s if s.split != UNDECIDED_SPLIT else dataclasses.replace(s, split=fallback)
    )
    all_skipped = (converted_skipped, assigned[_SKIPPED_TAG]) | "AllSkipped" >> beam.Flatten()
    return assigned["pointers"], all_skipped
