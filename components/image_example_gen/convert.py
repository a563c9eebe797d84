"""One image conversion, end to end: list, label, split, run the Beam pipeline, check the
counts, publish. Shared by the TFX executor and `imgpipe convert`.

Splits are decided at listing for a split layout (by folder) and for split_by path; for
split_by content (the default) the pipeline decides them after reading each file
(split_assignment.py), and finds label conflicts either way.

Shards are written under a work folder inside the output and moved into
`Split-<name>/` (their DALI index files into `dali_index/Split-<name>/`) only after the
pipeline succeeded and the counts reconcile. The metadata files follow, and the
manifest comes last: until it exists, readers refuse the output. A run first removes
whatever an earlier run into the same folder left (a retried step gets the same URI),
so a rerun gives byte-identical output; a failed or stopped run removes what it wrote.
"""

from __future__ import annotations

import collections
import dataclasses
import os
import re
import uuid
from collections.abc import Callable

import apache_beam as beam

from imgpipe.components.common.formats import artifacts, label_map, layout, manifest
from imgpipe.components.common.formats.conversion_summary import (
    ConversionSummary,
    LabelConflict,
)
from imgpipe.components.common.runtime import phases, progress
from imgpipe.components.common.runtime.printable import printable
from imgpipe.components.common.storage import disk_full, fileio
from imgpipe.components.image_example_gen import (
    data_warnings,
    free_space,
    publishing,
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

# What the progress bar says is done to the images it counts.
CONVERTED = "converted"


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
    """Converts into work_dir: shards under `shards/Split-<name>/` (their DALI index
    files under `shards/dali_index/Split-<name>/`), and the stage results, the shards'
    rows and the label conflicts, under `results/` (the folders must exist; read them
    back with `_read_results`).

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
    results_dir = _results_dir(work_dir)
    pointers, skipped = (
        converted[transforms.RECORDS_TAG],
        converted[transforms.SKIPPED_TAG],
    ) | "AssignSplits" >> split_assignment.AssignSplits(
        output_options, by_content, num_images, results_dir
    )
    _ = (pointers, skipped) | "WriteShards" >> shards.WriteShards(
        os.path.join(work_dir, "shards"),
        results_dir,
        output_options.num_shards,
        output_options.shard_mb,
        output_options.gzip,
        output_options.seed,
        output_options.writes_dali_index,
    )


def _results_dir(work_dir: str) -> str:
    return os.path.join(work_dir, "results")


def _read_results(work_dir: str) -> tuple[list[shards.ShardResult], list[LabelConflict]]:
    """What `build_pipeline` sent back: the shards' rows in (split, shard) order and the
    label conflicts by first path."""
    results_dir = _results_dir(work_dir)
    return shards.read_shard_results(results_dir), split_assignment.read_conflicts(results_dir)


def _common_reasons(files: list[listing_lib.ListedFile], shown: int = 3) -> str:
    """The most common reasons, with their counts, for a one-line message."""
    counts = collections.Counter(f.reason for f in files).most_common(shown)
    return "".join(f"; {count} x {printable(reason)}" for reason, count in counts)


def _conversion_error_message(error: Exception) -> str | None:
    match = re.search(r"ImageConversionError: (.+?)(?: \[while running|\n|$)", str(error))
    return match.group(1).strip().strip("'\"") if match else None


@dataclasses.dataclass(frozen=True)
class _Plan:
    listing: listing_lib.Listing
    labels: list[str]
    tasks: list[tasks.ConversionTask]
    split_names: list[str]
    source_bytes: int | None  # the images' total size; None when they are not local
    given: GivenSplits | None  # a split layout's folders, mapped to splits
    class_folders: list[str]  # the label of every class folder, empty ones too


def run_conversion(
    input_root: str,
    output_dir: str,
    image_options: ImageOptions,
    output_options: OutputOptions,
    make_pipeline: Callable[[], beam.Pipeline],
    progress_dir: str | None = None,
) -> ConversionResult:
    """Converts the image folder `input_root` into `output_dir`.

    `output_dir` may hold what an earlier conversion left, finished or not: it is
    removed first. Anything else there is refused.

    Args:
      make_pipeline: returns the Beam pipeline to run on (runner and options set).
      progress_dir: a local folder for a progress bar (runtime/progress.py): the number
        of images is written there before the pipeline runs, and the workers count the
        images they have done into it; None for none.

    Raises:
      ValueError: no images, a bad image under on_error=fail, or a file in output_dir
        that a conversion does not write (the options were validated when built).
      NotEnoughSpaceError: the output filesystem is too small.
      publishing.CountMismatchError: the counts do not reconcile.
    """
    publishing.clear_output(output_dir)
    try:
        phases.reached(phases.LISTING)
        plan = _plan(input_root, output_options)
        if plan.source_bytes is not None and not image_options.transforms_pixels:
            free_space.check(output_dir, free_space.needed_bytes(plan.source_bytes))
        try:
            summary, entries = _convert_and_publish(
                plan,
                input_root,
                output_dir,
                image_options,
                output_options,
                make_pipeline,
                progress_dir,
            )
        except Exception as e:
            if disk_full.is_out_of_space(e):
                raise free_space.out_of_space(output_dir, plan.source_bytes) from e
            raise
        phases.reached(phases.PUBLISHED)
        manifest.write(output_dir, entries)
    except BaseException:  # a stop by signal too: what was written goes
        publishing.clear_output(output_dir)
        raise
    return ConversionResult(output_dir, plan.split_names, plan.labels, summary)


def _plan(input_root: str, output_options: OutputOptions) -> _Plan:
    listing = listing_lib.list_images(
        input_root, output_options.layout, output_options.follow_links
    )
    if not listing.images:
        raise ValueError(
            f"no labelled images under {input_root!r}: expected root/<label>/<image> or "
            f"root/<split>/<label>/<image>; of {listing.files_seen} files seen, "
            f"{len(listing.ignored)} are ignored and {len(listing.skipped)} skipped"
            + _common_reasons(listing.ignored + listing.skipped)
        )
    if output_options.on_error == ON_ERROR_FAIL and listing.skipped:
        first = listing.skipped[0]
        raise ValueError(f"{printable(first.relpath)}: {printable(first.reason)}")
    existing = (
        list(label_map.read(output_options.label_map_uri).labels)
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
    return _Plan(
        listing,
        labels,
        plan_tasks(listing, labels, output_options, given),
        given.names if given is not None else [name for name, _ in output_options.splits],
        free_space.input_bytes(input_root, [image.relpath for image in listing.images]),
        given,
        [
            label
            for split, label in listing_lib.class_folders(listing)
            if given is None or split in given.split_of
        ],
    )


def _summarize(
    plan: _Plan,
    shard_results: list[shards.ShardResult],
    conflicts: list[LabelConflict],
    image_options: ImageOptions,
    output_options: OutputOptions,
) -> ConversionSummary:
    """The conversion's summary, from its plan and what the pipeline sent back: the
    shards' counts, the label conflicts and the warnings they give."""
    summary = publishing.summarize(
        plan.listing,
        shard_results,
        plan.split_names,
        plan.labels,
        image_options,
        output_options,
    )
    return dataclasses.replace(
        summary,
        split_by="" if plan.given is not None else output_options.split_by,
        label_conflicts=tuple(conflicts),
        warnings=tuple(
            data_warnings.conversion_warnings(
                split_labels={split: s.labels for split, s in summary.splits.items()},
                listed_by_label=publishing.listed_by_label(plan.listing),
                class_folders=plan.class_folders,
                given_splits=plan.given is not None,
                conflicts=conflicts,
                split_notes=plan.given.notes if plan.given is not None else (),
                refused_folders=listing_lib.refused_class_folders(plan.listing),
            )
        )
        + publishing.index_warnings(output_options),
    )


def _convert_and_publish(
    plan: _Plan,
    input_root: str,
    output_dir: str,
    image_options: ImageOptions,
    output_options: OutputOptions,
    make_pipeline: Callable[[], beam.Pipeline],
    progress_dir: str | None,
) -> tuple[ConversionSummary, dict[str, manifest.FileEntry]]:
    """Converts in a work folder, moves the shards into place, then writes the metadata
    files. The work folder is gone when this returns or raises.

    Returns:
      The summary, and the manifest entries of every file written.
    """
    work_dir = os.path.join(output_dir, layout.WORK_DIR_PREFIX + uuid.uuid4().hex)
    staged = os.path.join(work_dir, "shards")
    folders = [os.path.join(work_dir, "spill"), _results_dir(work_dir)]
    for split in plan.split_names:
        folders.append(artifacts.split_dir(staged, split))
        if output_options.writes_dali_index:
            folders.append(artifacts.dali_index_dir(staged, split))
    for folder in folders:
        fileio.makedirs(folder)
    try:
        progress.write_total(progress_dir, len(plan.tasks), CONVERTED)
        task_pattern = tasks.write_task_files(plan.tasks, os.path.join(work_dir, "tasks"))
        pipeline = make_pipeline()
        build_pipeline(
            pipeline,
            task_pattern,
            input_root,
            work_dir,
            image_options,
            output_options,
            progress_dir,
            by_content=plan.given is None and output_options.split_by == SPLIT_BY_CONTENT,
            num_images=len(plan.tasks),
        )
        try:
            pipeline.run().wait_until_finish()
        except Exception as e:  # Beam wraps worker errors; surface ours plainly.
            message = _conversion_error_message(e)
            if message is None:
                raise
            raise transforms.ImageConversionError(message) from e
        shard_results, conflicts = _read_results(work_dir)
        summary = _summarize(plan, shard_results, conflicts, image_options, output_options)
        entries = publishing.publish_shards(
            staged, output_dir, plan.split_names, shard_results, output_options
        )
    finally:
        fileio.remove(work_dir)
    entries.update(
        publishing.write_metadata(output_dir, plan.listing, plan.labels, summary, shard_results)
    )
    return summary, entries
