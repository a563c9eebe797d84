"""One image conversion, end to end: list, label, split, run the Beam pipeline, check the
counts, publish. Shared by the TFX executor and `imgpipe convert`.

Splits are decided at listing for a split layout (by folder) and for split_by path; for
split_by content (the default) the pipeline decides them after reading each file
(split_assignment.py), and finds label conflicts either way.

Shards are written under a work directory inside the output and moved into
`Split-<name>/` only after the pipeline succeeded and the counts reconcile, so a
failed run publishes no shard.
"""

from __future__ import annotations

import dataclasses
import os
import re
import uuid
from collections.abc import Callable

import apache_beam as beam
import tensorflow as tf

from imgpipe.components.common import artifacts, config_loader, conversion_summary, layout
from imgpipe.components.common.conversion_summary import ConversionSummary, SplitSummary
from imgpipe.components.image_example_gen import (
    data_warnings,
    shards,
    split_assignment,
    splitting,
    tasks,
    transforms,
)
from imgpipe.components.image_example_gen import labels as label_lib
from imgpipe.components.image_example_gen import listing as listing_lib
from imgpipe.components.image_example_gen.options import (
    LAYOUT_SPLIT,
    ON_ERROR_FAIL,
    SPLIT_BY_CONTENT,
    ImageOptions,
    OutputOptions,
)
from imgpipe.components.image_example_gen.split_names import GivenSplits, resolve_given_splits

WORK_DIR_PREFIX = ".imgpipe-work-"


class CountMismatchError(RuntimeError):
    """Files seen != written + skipped + ignored: something was lost; nothing is published."""


@dataclasses.dataclass
class ConversionResult:
    output_dir: str
    split_names: list[str]
    labels: list[str]
    summary: ConversionSummary


def plan_tasks(
    listing: listing_lib.Listing,
    labels: list[str],
    options: OutputOptions,
    given: GivenSplits | None = None,
) -> list[tasks.ConversionTask]:
    """Decides label id and split of every image, in sorted path order.

    A split layout's images take the split of their folder (`given`). A flat layout's
    split is decided here by path hash, or by content (`split_by`) in the pipeline,
    after conversion: until then each task holds the first split, where a file that
    fails to convert is recorded.
    """
    ids = {label: i for i, label in enumerate(labels)}
    decided: dict[str, str]
    if listing.layout == LAYOUT_SPLIT:
        assert given is not None  # a split layout's folders are resolved first
        decided = {
            image.relpath: given.split_of[image.split]
            for image in listing.images
            if image.split is not None
        }
    elif options.split_by == SPLIT_BY_CONTENT:
        decided = {image.relpath: options.splits[0][0] for image in listing.images}
    elif options.stratify:
        by_label: dict[str, list[str]] = {}
        for image in listing.images:
            by_label.setdefault(image.label, []).append(image.relpath)
        decided = splitting.stratified_split(by_label, options.splits)
    else:
        decided = {
            image.relpath: splitting.hash_split(image.relpath, options.splits)
            for image in listing.images
        }
    return [
        tasks.ConversionTask(image.relpath, image.label, ids[image.label], decided[image.relpath])
        for image in listing.images
    ]


def build_pipeline(
    pipeline: beam.Pipeline,
    task_pattern: str,
    root: str,
    work_dir: str,
    image_options: ImageOptions,
    output_options: OutputOptions,
    progress_dir: str | None = None,
    *,
    by_content: bool,
    num_images: int,
) -> None:
    """Converts into work_dir: shards under `shards/`, result rows and label conflicts
    under `results/`.

    Args:
      by_content: the tasks' splits are undecided: decide them by content.
      num_images: the tasks planned, to size the search for label conflicts.
    """
    converted = (
        pipeline
        | "ListedImages" >> tasks.ReadTaskBatches(task_pattern)
        | "Convert"
        >> transforms.ConvertImages(
            root,
            os.path.join(work_dir, "spill"),
            image_options,
            output_options.on_error == ON_ERROR_FAIL,
            progress_dir,
        )
    )
    _ = (
        (converted[transforms.RECORDS_TAG], converted[transforms.SKIPPED_TAG])
        | "AssignSplits"
        >> split_assignment.AssignSplits(
            output_options, by_content, num_images, os.path.join(work_dir, "results")
        )
        | "WriteShards"
        >> shards.WriteShards(
            os.path.join(work_dir, "shards"),
            os.path.join(work_dir, "results"),
            output_options.num_shards,
            output_options.shard_mb,
            output_options.gzip,
            output_options.seed,
        )
    )


def _conversion_error_message(error: Exception) -> str | None:
    match = re.search(r"ImageConversionError: (.+?)(?: \[while running|\n|$)", str(error))
    return match.group(1).strip().strip("'\"") if match else None


def run_conversion(
    input_root: str,
    output_dir: str,
    image_options: ImageOptions,
    output_options: OutputOptions,
    make_pipeline: Callable[[], beam.Pipeline],
    progress: Callable[[int, str | None], None] | None = None,
) -> ConversionResult:
    """Converts the image folder `input_root` into `output_dir`.

    Args:
      make_pipeline: returns the Beam pipeline to run on (runner and options set).
      progress: called as progress(total, progress_dir) before the pipeline runs, so
        a caller can watch the local progress files; None for no progress files.

    Raises:
      ValueError: bad options, no images, or a bad image under on_error=fail.
      CountMismatchError: the counts do not reconcile.
    """
    image_options.validate()
    output_options.validate()
    listing = listing_lib.list_images(input_root, output_options.layout)
    if not listing.images:
        raise ValueError(
            f"no labelled images under {input_root!r}: expected root/<label>/<image> or "
            f"root/<split>/<label>/<image> ({listing.files_seen} files seen, "
            f"{len(listing.ignored)} ignored, {len(listing.unlabeled)} outside label folders)"
        )
    if output_options.on_error == ON_ERROR_FAIL and listing.unlabeled:
        first = listing.unlabeled[0]
        raise ValueError(f"{first.relpath}: {first.reason}")
    existing = (
        label_lib.read_label_map(output_options.label_map_uri)
        if output_options.label_map_uri
        else None
    )
    labels = label_lib.build_labels(listing.labels, existing, output_options.on_new_label)
    given = (
        resolve_given_splits(
            listing.given_splits, output_options.train_split, output_options.eval_split
        )
        if listing.layout == LAYOUT_SPLIT
        else None
    )
    planned = plan_tasks(listing, labels, output_options, given)
    split_names = given.names if given is not None else [name for name, _ in output_options.splits]
    class_folders = [
        label
        for split, label in listing_lib.class_folders(input_root, listing.layout)
        if given is None or split in given.split_of
    ]

    work_dir = os.path.join(output_dir, WORK_DIR_PREFIX + uuid.uuid4().hex)
    for sub in ("spill", "results"):
        tf.io.gfile.makedirs(os.path.join(work_dir, sub))
    try:
        progress_dir = None
        if progress is not None:
            import tempfile

            progress_dir = tempfile.mkdtemp(prefix="imgpipe-progress-")
            progress(len(planned), progress_dir)
        task_pattern = tasks.write_task_files(planned, os.path.join(work_dir, "tasks"))
        pipeline = make_pipeline()
        build_pipeline(
            pipeline,
            task_pattern,
            input_root,
            work_dir,
            image_options,
            output_options,
            progress_dir,
            by_content=given is None and output_options.split_by == SPLIT_BY_CONTENT,
            num_images=len(planned),
        )
        try:
            pipeline.run().wait_until_finish()
        except Exception as e:  # Beam wraps worker errors; surface ours plainly.
            message = _conversion_error_message(e)
            if message is None:
                raise
            raise transforms.ImageConversionError(message) from e
        shard_results = shards.read_shard_results(os.path.join(work_dir, "results"))
        skipped_files = [
            (relpath, reason) for result in shard_results for relpath, reason in result.skipped
        ]
        conflicts = split_assignment.read_conflicts(os.path.join(work_dir, "results"))
        summary = _summarize(
            listing,
            shard_results,
            skipped_files,
            split_names,
            labels,
            image_options,
            output_options,
        )
        summary = dataclasses.replace(
            summary,
            split_by="" if given is not None else output_options.split_by,
            label_conflicts=tuple(conflicts),
            warnings=tuple(
                data_warnings.conversion_warnings(
                    split_labels={split: s.labels for split, s in summary.splits.items()},
                    listed_by_label=_listed_by_label(listing),
                    class_folders=class_folders,
                    given_splits=given is not None,
                    conflicts=conflicts,
                    split_notes=given.notes if given is not None else (),
                )
            ),
        )
        _publish(work_dir, output_dir, split_names, shard_results, output_options)
    finally:
        if tf.io.gfile.exists(work_dir):
            tf.io.gfile.rmtree(work_dir)

    skipped = sorted(
        [{"path": f.relpath, "reason": f.reason} for f in listing.unlabeled]
        + [{"path": relpath, "reason": reason} for relpath, reason in skipped_files],
        key=lambda row: row["path"],
    )
    label_lib.write_label_files(output_dir, labels)
    artifacts.write_json(os.path.join(output_dir, layout.SKIPPED_FILE), skipped)
    artifacts.write_json(
        os.path.join(output_dir, layout.IGNORED_FILE),
        [{"path": f.relpath, "reason": f.reason} for f in listing.ignored],
    )
    conversion_summary.write(output_dir, summary)
    return ConversionResult(output_dir, split_names, labels, summary)


def _listed_by_label(listing: listing_lib.Listing) -> dict[str, int]:
    counts: dict[str, int] = {}
    for image in listing.images:
        counts[image.label] = counts.get(image.label, 0) + 1
    return counts


def _summarize(
    listing, shard_results, skipped_files, split_names, labels, image_options, output_options
) -> ConversionSummary:
    written = sum(result.records for result in shard_results)
    skipped = len(skipped_files) + len(listing.unlabeled)
    ignored = len(listing.ignored)
    if listing.files_seen != written + skipped + ignored:
        raise CountMismatchError(
            f"{listing.files_seen} files seen but {written} written + {skipped} skipped + "
            f"{ignored} ignored = {written + skipped + ignored}; nothing was published"
        )
    splits = {}
    for split in split_names:
        results = [result for result in shard_results if result.split == split]
        label_counts: dict[str, int] = {}
        for result in results:
            for label, count in result.labels:
                label_counts[label] = label_counts.get(label, 0) + count
        splits[split] = SplitSummary(
            records=sum(result.records for result in results),
            bytes_in=sum(result.bytes_in for result in results),
            bytes_out=sum(result.bytes_out for result in results),
            reencoded=sum(result.reencoded for result in results),
            num_shards=max([result.num_shards for result in results], default=1),
            labels=dict(sorted(label_counts.items())),
        )
    bytes_in = sum(s.bytes_in for s in splits.values())
    bytes_out = sum(s.bytes_out for s in splits.values())
    ignored_reasons: dict[str, int] = {}
    for f in listing.ignored:
        ignored_reasons[f.reason] = ignored_reasons.get(f.reason, 0) + 1
    return ConversionSummary(
        version=conversion_summary.SCHEMA_VERSION,
        layout=listing.layout,
        files_seen=listing.files_seen,
        written=written,
        skipped=skipped,
        ignored=ignored,
        ignored_by_reason=dict(sorted(ignored_reasons.items())),
        bytes_in=bytes_in,
        bytes_out=bytes_out,
        size_ratio=round(bytes_out / bytes_in, 4) if bytes_in else None,
        num_labels=len(labels),
        splits=splits,
        compression="gzip" if output_options.gzip else "none",
        image_options=config_loader.to_dict(image_options),
    )


def _publish(
    work_dir: str,
    output_dir: str,
    split_names: list[str],
    shard_results: list[shards.ShardResult],
    output_options: OutputOptions,
) -> None:
    """Moves shards into Split-<name>/, adding empty shards so every split has -of-N complete."""
    staged = os.path.join(work_dir, "shards")
    for split in split_names:
        results = [result for result in shard_results if result.split == split]
        num_shards = results[0].num_shards if results else 1
        written = {result.shard for result in results}
        split_staged = artifacts.split_dir(staged, split)
        tf.io.gfile.makedirs(split_staged)
        for shard in range(num_shards):
            if shard not in written:
                name = shards.shard_file_name(shard, num_shards, output_options.gzip)
                shards.write_tfrecord(os.path.join(split_staged, name), [], output_options.gzip)
    for split in split_names:
        target = artifacts.split_dir(output_dir, split)
        tf.io.gfile.makedirs(target)
        for name in sorted(tf.io.gfile.listdir(artifacts.split_dir(staged, split))):
            tf.io.gfile.rename(
                os.path.join(artifacts.split_dir(staged, split), name),
                os.path.join(target, name),
                overwrite=False,
            )
