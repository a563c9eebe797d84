"""Splits decided by content, and label conflicts found, inside the conversion's Beam
pipeline: between converting the images and writing the shards.

A content split key (the SHA-256 of the image bytes) is known only once a file has been
read, so it cannot be decided at listing as a path key is. The records stay where
ConvertImages spilled them; only small metadata moves:

1. Each batch's (content hash, label, path) triples are grouped into buckets of
   content hashes, where all copies of an image meet. Byte-identical images filed
   under different labels are label conflicts; each bucket writes its own as a stage
   result (LABEL_CONFLICTS), which the launcher reads back with `read_conflicts`.
2. With stratify, each bucket also gives, per label, the split hashes of the distinct
   contents it ranks; grouped by label, they become the label's cut points
   (splitting.cut_points): one number per split.
3. Each batch of record pointers gets its split from its label's cut points, a side
   input of labels x splits numbers, or from its content hash alone without stratify.
   A pointer whose split was decided at listing (a split layout, or split_by path)
   keeps it. Copies in a label conflict are skipped, with the conflict as the reason,
   unless on_label_conflict is keep.

Cost: two groupings of small metadata (about 100 bytes an image, then 8), no second
read of any file, no shuffle of the records, and side inputs that do not grow with the
images (but for the conflicts). On the in-process runner each added stage costs a
fixed time, so there are as few as the decision needs.
"""

from __future__ import annotations

import dataclasses
import itertools
import math
from collections.abc import Iterable, Iterator

import apache_beam as beam

from imgpipe.components.common.formats.conversion_summary import LabelConflict
from imgpipe.components.common.storage import stage_results
from imgpipe.components.image_example_gen import splitting
from imgpipe.components.image_example_gen.options import (
    LABEL_CONFLICT_FAIL,
    LABEL_CONFLICT_KEEP,
    OutputOptions,
)
from imgpipe.components.image_example_gen.shards import RecordPointer, SkippedFile
from imgpipe.components.image_example_gen.transforms import ImageConversionError

# Images whose content keys share one bucket of the conflict search: about 10 MB of keys.
IMAGES_PER_CONTENT_BUCKET = 100_000
# Each content bucket's label conflicts, keyed by bucket.
LABEL_CONFLICTS: stage_results.ResultKind[tuple[LabelConflict, ...]] = stage_results.ResultKind(
    "label_conflicts", tuple
)

_CONFLICTS_TAG = "conflicts"
_HASHES_TAG = "hashes"
_SKIPPED_TAG = "skipped"


def content_buckets(num_images: int) -> int:
    """How many buckets the conflict search of `num_images` images uses."""
    return max(1, math.ceil(num_images / IMAGES_PER_CONTENT_BUCKET))


def _content_keys(
    pointers: list[RecordPointer], num_buckets: int
) -> Iterator[tuple[int, list[tuple[str, str, str]]]]:
    """A batch's (sha256, label, relpath) triples, by bucket: few elements per batch."""
    buckets: dict[int, list[tuple[str, str, str]]] = {}
    for p in pointers:
        bucket = int(p.sha256[:15], 16) % num_buckets
        buckets.setdefault(bucket, []).append((p.sha256, p.label, p.relpath))
    yield from buckets.items()


class FindConflictsFn(beam.DoFn):
    """One bucket's label conflicts, written all together into `results_dir`
    (LABEL_CONFLICTS) and yielded each by content hash, and, to rank, each label's split
    hashes of the contents in the bucket."""

    def __init__(self, on_label_conflict: str, rank: bool, results_dir: str):
        self._keep = on_label_conflict == LABEL_CONFLICT_KEEP
        self._fail = on_label_conflict == LABEL_CONFLICT_FAIL
        self._rank = rank
        self._results_dir = results_dir

    def process(self, element: tuple[int, Iterable[list[tuple[str, str, str]]]]) -> Iterator:
        """Writes the bucket's LabelConflicts, by first path; yields (sha256,
        LabelConflict) and (label, split hashes), each tagged."""
        bucket, batches = element
        by_content: dict[str, list[tuple[str, str]]] = {}
        for batch in batches:
            for sha256, label, relpath in batch:
                by_content.setdefault(sha256, []).append((label, relpath))
        conflicts = []
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
                conflicts.append(conflict)
                yield beam.pvalue.TaggedOutput(_CONFLICTS_TAG, (sha256, conflict))
                if not self._keep:
                    continue
            if self._rank:
                # A kept conflict is ranked under its first label, so its copies share a split.
                hashes_by_label.setdefault(labels[0], []).append(splitting.split_hash(sha256))
        ordered = tuple(sorted(conflicts, key=lambda c: c.paths))
        stage_results.write_result(self._results_dir, LABEL_CONFLICTS, bucket, ordered)
        for label_hashes in hashes_by_label.items():
            yield beam.pvalue.TaggedOutput(_HASHES_TAG, label_hashes)


class AssignSplitFn(beam.DoFn):
    """Gives each pointer of a batch its split; skips the copies of a label conflict."""

    def __init__(self, options: OutputOptions, by_content: bool):
        self._splits = options.splits
        self._names = [name for name, _ in options.splits]
        self._stratify = options.stratify
        self._keep = options.on_label_conflict == LABEL_CONFLICT_KEEP
        self._by_content = by_content

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
            split = pointer.split
            if self._by_content and (conflict is None or self._keep):
                split = self._decide(pointer, conflict, cuts_by_label)
            if conflict is not None and not self._keep:
                skipped = SkippedFile(split, pointer.relpath, conflict.reason)
                yield beam.pvalue.TaggedOutput(_SKIPPED_TAG, skipped)
                continue
            kept.append(
                pointer if split == pointer.split else dataclasses.replace(pointer, split=split)
            )
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
        label = conflict.labels[0] if conflict is not None else pointer.label
        hash_value = splitting.split_hash(pointer.sha256)
        return splitting.split_at(hash_value, cuts_by_label[label], self._names)


def read_conflicts(results_dir: str) -> list[LabelConflict]:
    """The LABEL_CONFLICTS written into `results_dir`, by first path."""
    by_bucket = stage_results.read_results(results_dir, LABEL_CONFLICTS)
    return sorted(itertools.chain.from_iterable(by_bucket.values()), key=lambda c: c.paths)


@beam.ptransform_fn
def AssignSplits(  # noqa: N802 - Beam transforms are named like classes
    converted: tuple[beam.PCollection, beam.PCollection],
    options: OutputOptions,
    by_content: bool,
    num_images: int,
    results_dir: str,
) -> tuple[beam.PCollection, beam.PCollection]:
    """Decides the splits by content and finds label conflicts, which it writes into
    `results_dir` (LABEL_CONFLICTS, one record per content bucket; the folder must exist).

    Args:
      converted: ConvertImages' lists of RecordPointer and its SkippedFiles.
      options: stratify, the splits and on_label_conflict.
      by_content: decide every pointer's split here (a flat layout with split_by
        content); otherwise each keeps the split decided at listing.
      num_images: the images planned, to size the conflict search.

    Returns:
      The lists of RecordPointer, each with its split, and every SkippedFile: those of
      the conversion and the copies of skipped label conflicts.
    """
    pointer_lists, skipped = converted
    found = (
        pointer_lists
        | "ContentKeys" >> beam.FlatMap(_content_keys, content_buckets(num_images))
        | "GroupByContent" >> beam.GroupByKey()
        | "FindConflicts"
        >> beam.ParDo(
            FindConflictsFn(options.on_label_conflict, by_content and options.stratify, results_dir)
        ).with_outputs(_CONFLICTS_TAG, _HASHES_TAG)
    )
    weights = [w for _, w in options.splits]
    cuts = (
        found[_HASHES_TAG]
        | "GroupByLabel" >> beam.GroupByKey()
        | "CutPoints"
        >> beam.MapTuple(
            lambda label, lists: (
                label,
                splitting.cut_points(itertools.chain.from_iterable(lists), weights),
            )
        )
    )
    assigned = pointer_lists | "Assign" >> beam.ParDo(
        AssignSplitFn(options, by_content),
        beam.pvalue.AsDict(cuts),
        beam.pvalue.AsDict(found[_CONFLICTS_TAG]),
    ).with_outputs(_SKIPPED_TAG, main="pointers")
    all_skipped = (skipped, assigned[_SKIPPED_TAG]) | "AllSkipped" >> beam.Flatten()
    return assigned["pointers"], all_skipped
