"""`imgpipe convert SRC OUT`: the ImageExampleGen conversion, outside TFX."""

from __future__ import annotations

import argparse
import os
import sys
from typing import TYPE_CHECKING, Any

from imgpipe.components.common.formats import layout
from imgpipe.components.common.runtime import config_loader
from imgpipe.components.common.runtime.printable import printable
from imgpipe.components.image_example_gen import (
    ON_ERROR_SKIP,
    ImageOptions,
    OutputOptions,
    eval_fraction,
    flat_splits,
)
from imgpipe.pipelines.cli import dataclass_flags, errors, paths, progress
from imgpipe.pipelines.cli.errors import UserError

if TYPE_CHECKING:  # conversion_summary loads TensorFlow, which `imgpipe --help` need not
    from imgpipe.components.common.formats.conversion_summary import ConversionSummary


# What to give instead of a data folder that is not one (convert's SRC, run local's --data).
IMAGE_FOLDER_FIX = "give the image folder (root/<label>/... or root/<split>/<label>/...)"


def _output_default(name: str) -> Any:
    return config_loader.field_default(OutputOptions, name)


def register(subparsers: argparse._SubParsersAction) -> None:
    parser = subparsers.add_parser(
        "convert",
        help="convert an image folder to sharded TFRecords (the ImageExampleGen transforms)",
        description="Convert SRC (root/<label>/... or root/<split>/<label>/...) into TFRecord "
        "shards under OUT. Apache Beam's own options (--runner, "
        "--direct_num_workers, ...) are passed to Beam, and so is everything after "
        "'--'; an option neither knows is an error. Without --runner the conversion "
        "uses every local core. Defaults are ImageExampleGen's.",
    )
    parser.add_argument("src", help="image folder (local, gs:// or s3://)")
    parser.add_argument(
        "out",
        help="output folder: new, empty, or left by an unfinished conversion (which is replaced)",
    )
    parser.add_argument(
        "--overwrite", action="store_true", help="replace a finished conversion in OUT"
    )
    image = parser.add_argument_group("what is done to each image (ImageOptions)")
    parser.set_defaults(
        image_flags=dataclass_flags.add_flags(image, ImageOptions, skip=("channels",))
    )
    image.add_argument(
        "--rgb", action="store_true", help="make every image 3-channel RGB (channels 3)"
    )
    output = parser.add_argument_group("how images are split and sharded (OutputOptions)")
    parser.set_defaults(
        output_flags=dataclass_flags.add_flags(output, OutputOptions, skip=("splits",))
    )
    output.add_argument(
        "--eval-fraction",
        type=float,
        metavar="F",
        default=eval_fraction(_output_default("splits")),
        help="fraction for the eval split of a flat layout (default %(default)s)",
    )
    progress.add_flag(parser)
    parser.set_defaults(handler=run, accepts_extra_args=True)


def _flat_splits(args: argparse.Namespace) -> tuple[tuple[str, float], ...]:
    try:
        return flat_splits(args.eval_fraction, args.train_split, args.eval_split)
    except ValueError as e:
        raise ValueError(f"--eval-fraction: {e}") from None


def options_from_args(args: argparse.Namespace) -> tuple[ImageOptions, OutputOptions]:
    """The conversion's options, built and validated by the one loader.

    Raises:
      ValueError: a bad value, naming the setting.
    """
    image_options = config_loader.from_dict(
        ImageOptions,
        {**dataclass_flags.values(args, args.image_flags), "channels": 3 if args.rgb else 0},
    )
    output_options = config_loader.from_dict(
        OutputOptions,
        {**dataclass_flags.values(args, args.output_flags), "splits": _flat_splits(args)},
    )
    return image_options, output_options


def run(args: argparse.Namespace) -> int:
    no_source = f"{args.src}: no such folder; {IMAGE_FOLDER_FIX}"
    # Local paths are checked before TensorFlow and Beam load (seconds), object stores after.
    paths.require_local_folder(args.src, args.src, IMAGE_FOLDER_FIX)
    image_options, output_options = options_from_args(args)
    paths.refuse_local_file_on_the_way(args.out)

    import apache_beam as beam
    from apache_beam.options.pipeline_options import PipelineOptions

    from imgpipe.components.common.storage import fileio
    from imgpipe.components.image_example_gen import (
        ImageConversionError,
        is_conversion_file,
        run_conversion,
    )
    from imgpipe.pipelines.beam_args import local_beam_args

    if not fileio.isdir(args.src):
        raise UserError(no_source)
    _check_output_path(args.out)
    if fileio.exists(os.path.join(args.out, layout.MANIFEST_FILE)) and not args.overwrite:
        raise UserError(
            f"{args.out} holds a finished conversion; pass --overwrite to replace it, or give "
            "a new folder"
        )
    left = fileio.list_dir(args.out)
    if left and all(is_conversion_file(name) for name in left) and not args.overwrite:
        print(
            f"imgpipe convert: replacing what an unfinished conversion left in {args.out}",
            file=sys.stderr,
        )
    pipeline_args = local_beam_args(args.extra_args)
    try:
        with progress.ProgressBar(enabled=progress.wanted(args)) as bar:
            result = run_conversion(
                args.src,
                args.out,
                image_options,
                output_options,
                make_pipeline=lambda: beam.Pipeline(options=PipelineOptions(pipeline_args)),
                progress_dir=bar.directory,
            )
    except ImageConversionError as e:  # --on-error fail
        raise UserError(
            f"{errors.message(e)}; fix or remove the file, or convert with "
            f"--on-error {ON_ERROR_SKIP} to skip it with a report entry"
        ) from e
    print_summary(result.summary, args.out)
    return 0


def _check_output_path(out: str) -> None:
    """Raises UserError when `out`, or the nearest of its folders that exists, is a file."""
    from imgpipe.components.common.storage import fileio

    paths.refuse_file_on_the_way(out, fileio.exists, fileio.isdir)


def print_summary(summary: ConversionSummary, out: str) -> None:
    mb = 1024 * 1024
    ratio = summary.size_ratio
    print(f"images written   {summary.written}")
    for split, s in summary.splits.items():
        print(
            f"  {split:14s} {s.records} records in {s.num_shards} shards, {s.bytes_out / mb:.1f} MB"
        )
    print(
        f"bytes in / out   {summary.bytes_in / mb:.1f} MB / {summary.bytes_out / mb:.1f} MB"
        f" (ratio {ratio if ratio is not None else 'n/a'})"
    )
    shown = printable(out)
    print(f"skipped          {summary.skipped}   (see {os.path.join(shown, layout.SKIPPED_FILE)})")
    print(f"ignored          {summary.ignored}   (see {os.path.join(shown, layout.IGNORED_FILE)})")
    print(f"files seen       {summary.files_seen} = written + skipped + ignored")
    rotated = sum(s.rotated for s in summary.splits.values())
    composited = sum(s.composited for s in summary.splits.values())
    if rotated or composited:
        print(
            f"made as seen     {rotated} rotated upright (EXIF orientation), {composited} "
            "transparent composited onto the background; re-encoded"
        )
    if summary.label_conflicts:
        conflicting = sum(len(c.paths) for c in summary.label_conflicts)
        outcome = "kept" if summary.label_conflicts[0].kept else "skipped"
        print(
            f"label conflicts  {len(summary.label_conflicts)}   ({conflicting} byte-identical "
            f"images under different labels, {outcome}; see label_conflicts in "
            f"{os.path.join(shown, layout.SUMMARY_FILE)})"
        )
    print(f"output           {shown}")
    for warning in summary.warnings:
        print(f"warning: {printable(warning.message)}")
