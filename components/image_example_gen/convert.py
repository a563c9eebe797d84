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

from imgpipe.components.common import (
    artifacts,
    config_loader,
    conversion_summary,
    disk_full,
    fileio,
    label_map,
    layout,
    manifest,
    outputs,
    phases,
)
from imgpipe.components.common.conversion_summary import (
    ConversionSummary,
    ConversionWarning,
    SplitSummary,
)
from imgpipe.components.common.printable import printable
from imgpipe.components.image_example_gen import (
    data_warnings,
    free_space,
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
    """Converts into work_dir: shards under `shards/Split-<name>/` (their DALI index
    files under `shards/dali_index/Split-<name>/`), result rows and label conflicts
    under `results/` (the folders must exist).

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
            output_options.writes_dali_index,
        )
    )


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
    progress: Callable[[int], None] | None = None,
    progress_dir: str | None = None,
) -> ConversionResult:
    """Converts the image folder `input_root` into `output_dir`.

    `output_dir` may hold what an earlier conversion left, finished or not: it is
    removed first. Anything else there is refused.

    Args:
      make_pipeline: returns the Beam pipeline to run on (runner and options set).
      progress: called with the number of images before the pipeline runs.
      progress_dir: a local folder where workers count converted images (see
        transforms.ConvertImages); None for none.

    Raises:
      ValueError: bad options, no images, a bad image under on_error=fail, or a file in
        output_dir that a conversion does not write.
      NotEnoughSpaceError: the output filesystem is too small.
      CountMismatchError: the counts do not reconcile.
    """
    image_options.validate()
    output_options.validate()
    clear_output(output_dir)
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
                progress,
                progress_dir,
            )
        except Exception as e:
            if disk_full.is_out_of_space(e):
                raise free_space.out_of_space(output_dir, plan.source_bytes) from e
            raise
        phases.reached(phases.PUBLISHED)
        manifest.write(output_dir, entries)
    except BaseException:  # a stop by signal too: what was written goes
        clear_output(output_dir)
        raise
    return ConversionResult(output_dir, plan.split_names, plan.labels, summary)


def is_conversion_file(name: str) -> bool:
    """Whether a name at the top of an output folder is one a conversion writes."""
    return (
        name.startswith((layout.SPLIT_DIR_PREFIX, layout.WORK_DIR_PREFIX))
        or name == layout.DALI_INDEX_DIR
        or name in layout.EXAMPLES_METADATA_FILES
        or name in (layout.MANIFEST_FILE, layout.MANIFEST_FILE + fileio.ATOMIC_TEMP_SUFFIX)
    )


def clear_output(output_dir: str) -> None:
    """Empties an output folder of what an earlier conversion left (making the folder if
    needed).

    Raises:
      ValueError: the folder holds something a conversion does not write; it is named,
        and nothing is removed.
    """
    names = fileio.list_dir(output_dir)
    foreign = [name for name in names if not is_conversion_file(name)]
    if foreign:
        raise ValueError(
            f"{os.path.join(output_dir, foreign[0])} was not written by a conversion; give "
            "a new or empty output folder"
        )
    outputs.clear(output_dir)


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


def _convert_and_publish(
    plan: _Plan,
    input_root: str,
    output_dir: str,
    image_options: ImageOptions,
    output_options: OutputOptions,
    make_pipeline: Callable[[], beam.Pipeline],
    progress: Callable[[int], None] | None,
    progress_dir: str | None,
) -> tuple[ConversionSummary, dict[str, manifest.FileEntry]]:
    """Converts in a work folder, moves the shards into place, then writes the metadata
    files. The work folder is gone when this returns or raises.

    Returns:
      The summary, and the manifest entries of every file written.
    """
    work_dir = os.path.join(output_dir, layout.WORK_DIR_PREFIX + uuid.uuid4().hex)
    staged = os.path.join(work_dir, "shards")
    folders = [os.path.join(work_dir, "spill"), os.path.join(work_dir, "results")]
    for split in plan.split_names:
        folders.append(artifacts.split_dir(staged, split))
        if output_options.writes_dali_index:
            folders.append(artifacts.dali_index_dir(staged, split))
    for folder in folders:
        fileio.makedirs(folder)
    try:
        if progress is not None:
            progress(len(plan.tasks))
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
        shard_results = shards.read_shard_results(os.path.join(work_dir, "results"))
        conflicts = split_assignment.read_conflicts(os.path.join(work_dir, "results"))
        summary = _summarize(
            plan.listing,
            shard_results,
            plan.split_names,
            plan.labels,
            image_options,
            output_options,
        )
        summary = dataclasses.replace(
            summary,
            split_by="" if plan.given is not None else output_options.split_by,
            label_conflicts=tuple(conflicts),
            warnings=tuple(
                data_warnings.conversion_warnings(
                    split_labels={split: s.labels for split, s in summary.splits.items()},
                    listed_by_label=_listed_by_label(plan.listing),
                    class_folders=plan.class_folders,
                    given_splits=plan.given is not None,
                    conflicts=conflicts,
                    split_notes=plan.given.notes if plan.given is not None else (),
                    refused_folders=listing_lib.refused_class_folders(plan.listing),
                )
            )
            + _index_warnings(output_options),
        )
        entries = _publish(staged, output_dir, plan.split_names, shard_results, output_options)
    finally:
        fileio.remove(work_dir)
    entries.update(_write_metadata(output_dir, plan, summary, shard_results))
    return summary, entries


def _write_metadata(
    output_dir: str,
    plan: _Plan,
    summary: ConversionSummary,
    shard_results: list[shards.ShardResult],
) -> dict[str, manifest.FileEntry]:
    """Writes the files beside the splits; returns their manifest entries."""
    listing = plan.listing
    skipped = sorted(
        [{"path": f.relpath, "reason": f.reason} for f in listing.skipped]
        + [
            {"path": relpath, "reason": reason}
            for result in shard_results
            for relpath, reason in result.skipped
        ],
        key=lambda row: row["path"],
    )
    label_map.write(output_dir, plan.labels)
    artifacts.write_json(os.path.join(output_dir, layout.SKIPPED_FILE), skipped)
    artifacts.write_json(
        os.path.join(output_dir, layout.IGNORED_FILE),
        [{"path": f.relpath, "reason": f.reason} for f in listing.ignored],
    )
    conversion_summary.write(output_dir, summary)
    return manifest.describe(output_dir, layout.EXAMPLES_METADATA_FILES)


def _index_warnings(output_options: OutputOptions) -> tuple[ConversionWarning, ...]:
    if not (output_options.dali_index and output_options.gzip):
        return ()
    return (
        ConversionWarning(
            conversion_summary.NO_DALI_INDEX,
            "no DALI index files were written: DALI cannot index GZIP shards "
            "(convert without gzip to read the shards with DALI)",
        ),
    )


def _relpath(folder: str, path: str) -> str:
    """`path` relative to `folder` (which it is inside), with / separators."""
    return path[len(folder.rstrip("/")) + 1 :]


def _listed_by_label(listing: listing_lib.Listing) -> dict[str, int]:
    counts: dict[str, int] = {}
    for image in listing.images:
        counts[image.label] = counts.get(image.label, 0) + 1
    return counts


def _summarize(
    listing, shard_results, split_names, labels, image_options, output_options
) -> ConversionSummary:
    written = sum(result.records for result in shard_results)
    skipped = sum(len(result.skipped) for result in shard_results) + len(listing.skipped)
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
            rotated=sum(result.rotated for result in results),
            composited=sum(result.composited for result in results),
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
        decoded_every_image=image_options.decodes_every_image,
    )


def _publish(
    staged: str,
    output_dir: str,
    split_names: list[str],
    shard_results: list[shards.ShardResult],
    output_options: OutputOptions,
) -> dict[str, manifest.FileEntry]:
    """Moves the staged shards into Split-<name>/ and their DALI index files into
    dali_index/Split-<name>/, adding empty shards so that every split has its -of-N
    complete; returns the files' manifest entries."""
    gzip, dali_index = output_options.gzip, output_options.writes_dali_index
    entries = {}
    for split in split_names:
        results = {result.shard: result for result in shard_results if result.split == split}
        num_shards = next(iter(results.values())).num_shards if results else 1
        for shard in range(num_shards):
            path, index_path = shards.shard_paths(
                staged, split, shard, num_shards, gzip, dali_index
            )
            if shard in results:
                written = shards.WrittenShard(
                    results[shard].manifest_entry, results[shard].index_manifest_entry
                )
            else:
                written = shards.write_tfrecord(path, [], gzip, index_path)
            entries[_relpath(staged, path)] = written.shard
            if index_path is not None:
                assert written.index is not None, f"{path} was written without its index"
                entries[_relpath(staged, index_path)] = written.index
    for split in split_names:
        fileio.makedirs(artifacts.split_dir(output_dir, split))
        if dali_index:
            fileio.makedirs(artifacts.dali_index_dir(output_dir, split))
    for relpath in entries:
        fileio.rename(os.path.join(staged, relpath), os.path.join(output_dir, relpath))
        phases.reached(phases.PUBLISHING)
    return entries
