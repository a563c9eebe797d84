"""What a conversion leaves: the counts reconciled into its summary (seen = written +
skipped + ignored, or nothing is published), the staged shards moved into
`Split-<name>/` and their DALI index files beside, and the metadata files; and the
clearing of what an earlier conversion into the same folder left.
"""

from __future__ import annotations

import os

from imgpipe.components.common.formats import (
    artifacts,
    conversion_summary,
    label_map,
    layout,
    manifest,
)
from imgpipe.components.common.formats.conversion_summary import (
    ConversionSummary,
    ConversionWarning,
    SplitSummary,
)
from imgpipe.components.common.runtime import config_loader, phases
from imgpipe.components.common.storage import fileio, outputs
from imgpipe.components.image_example_gen import listing as listing_lib
from imgpipe.components.image_example_gen import shards
from imgpipe.components.image_example_gen.options import OutputOptions


class CountMismatchError(RuntimeError):
    """Files seen != written + skipped + ignored: something was lost; nothing is published."""


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


def write_metadata(
    output_dir: str,
    listing: listing_lib.Listing,
    labels: list[str],
    summary: ConversionSummary,
    shard_results: list[shards.ShardResult],
) -> dict[str, manifest.FileEntry]:
    """Writes the files beside the splits; returns their manifest entries."""
    skipped = sorted(
        [{"path": f.relpath, "reason": f.reason} for f in listing.skipped]
        + [
            {"path": relpath, "reason": reason}
            for result in shard_results
            for relpath, reason in result.skipped
        ],
        key=lambda row: row["path"],
    )
    label_map.write(output_dir, labels)
    artifacts.write_json(os.path.join(output_dir, layout.SKIPPED_FILE), skipped)
    artifacts.write_json(
        os.path.join(output_dir, layout.IGNORED_FILE),
        [{"path": f.relpath, "reason": f.reason} for f in listing.ignored],
    )
    conversion_summary.write(output_dir, summary)
    return manifest.describe(output_dir, layout.EXAMPLES_METADATA_FILES)


def index_warnings(output_options: OutputOptions) -> tuple[ConversionWarning, ...]:
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


def listed_by_label(listing: listing_lib.Listing) -> dict[str, int]:
    counts: dict[str, int] = {}
    for image in listing.images:
        counts[image.label] = counts.get(image.label, 0) + 1
    return counts


def summarize(
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


def publish_shards(
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
