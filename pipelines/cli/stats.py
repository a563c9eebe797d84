"""`imgpipe stats EXAMPLES_DIR`: ImageStatistics outside TFX (JSON and HTML report)."""

from __future__ import annotations

import argparse
import os
from typing import TYPE_CHECKING

from imgpipe.components.common.formats import layout
from imgpipe.components.common.images.model_input import DEFAULT_CROP_FRACTION
from imgpipe.components.common.runtime import config_loader
from imgpipe.components.common.runtime.printable import printable
from imgpipe.components.image_statistics import StatisticsConfig
from imgpipe.components.trainer import TrainerConfig
from imgpipe.pipelines.cli import dataclass_flags, paths
from imgpipe.pipelines.cli.errors import UserError

if TYPE_CHECKING:  # image_stats loads TensorFlow, which `imgpipe --help` need not
    from imgpipe.components.common.formats.image_stats import ImageStats
    from imgpipe.components.image_statistics import ProducedStatistics


# Flags kept from an earlier release, where they differ from the field's name.
FLAG_NAMES = {"sample_thumbnails": "thumbnails", "native_resolution": "native"}


def register(subparsers: argparse._SubParsersAction) -> None:
    parser = subparsers.add_parser(
        "stats",
        help="image statistics, data checks and an HTML report of converted Examples",
        description="Compute the exact pixel mean and std at the Trainer's resolution, "
        "size, format and label distributions, duplicates and train/eval "
        "leakage of EXAMPLES_DIR (the output of ImageExampleGen or `imgpipe "
        "convert`), and draw them in a self-contained HTML report. Exits with "
        "status 1 when it finds anomalies, unless --no-fail-on-anomalies. "
        "Apache Beam's own options (--runner, --direct_num_workers, ...) go to Beam, "
        "and so does everything after '--'; an option neither knows is an error. "
        "With --baseline, also compares the data with a baseline's (drift). "
        "Defaults are ImageStatistics'.",
    )
    parser.add_argument(
        "examples_dir",
        help="Examples folder with Split-<name>/, "
        f"{layout.LABEL_MAP_FILE} and "
        f"{layout.SUMMARY_FILE} (local, gs:// or s3://)",
    )
    parser.add_argument(
        "--json",
        metavar="FILE",
        help=f"also write the statistics, as an {layout.IMAGE_STATS_FILE} (default: not "
        "written; the summary and the report show them)",
    )
    parser.add_argument(
        "--html",
        default=layout.REPORT_FILE,
        metavar="FILE",
        help="where to write the report (default %(default)s)",
    )
    parser.add_argument(
        "--image-size",
        type=int,
        default=TrainerConfig().input_size,
        help="the Trainer's input side (default %(default)s, the default model's)",
    )
    parser.add_argument(
        "--crop-fraction",
        type=float,
        default=DEFAULT_CROP_FRACTION,
        help="the Trainer's eval center-crop fraction (default %(default)s)",
    )
    parser.add_argument(
        "--baseline",
        metavar="PATH",
        help="compare with this data's statistics (drift): an image_stats.json, a folder "
        "holding one, or a serving directory (its newest pushed model's training data)",
    )
    settings = parser.add_argument_group(
        "ImageStatistics' settings (the pipeline config's `statistics:` section)"
    )
    parser.set_defaults(
        statistics_flags=dataclass_flags.add_flags(settings, StatisticsConfig, FLAG_NAMES)
    )
    parser.set_defaults(handler=run, accepts_extra_args=True)


_EXAMPLES_FIX = "give the output folder of `imgpipe convert` or an Examples artifact's folder"


def _no_baseline(baseline: str) -> str:
    return (
        f"--baseline {baseline} does not exist: give an {layout.IMAGE_STATS_FILE}, "
        "a folder holding one, or a serving directory"
    )


def run(args: argparse.Namespace) -> int:
    # Local paths are checked before TensorFlow and Beam load (seconds), object stores after.
    paths.require_local_folder(args.examples_dir, args.examples_dir, _EXAMPLES_FIX)
    if args.baseline is not None:
        paths.require_local_path(args.baseline, _no_baseline(args.baseline))
    outputs = [path for path in (args.html, args.json) if path is not None]
    for path in outputs:
        paths.refuse_local_file_on_the_way(os.path.dirname(path) or ".")

    from imgpipe.components.common.storage import fileio
    from imgpipe.components.image_statistics import blocking_anomalies, validate_geometry

    if not fileio.isdir(args.examples_dir):
        raise UserError(f"{args.examples_dir}: no such folder; {_EXAMPLES_FIX}")
    validate_geometry(args.image_size, args.crop_fraction)
    config = config_loader.from_dict(
        StatisticsConfig, dataclass_flags.values(args, args.statistics_flags)
    )
    produced = _produce(args, config)
    _write_outputs(args, outputs, produced)
    print_summary(produced.stats, args.json, args.html)
    return 1 if blocking_anomalies(produced.anomalies, config) else 0


def _produce(args: argparse.Namespace, config: StatisticsConfig) -> ProducedStatistics:
    """The statistics, anomalies and report of `args.examples_dir` (drift against
    `args.baseline`), computed by a local Beam pipeline in a temporary folder."""
    import tempfile

    import apache_beam as beam
    from apache_beam.options.pipeline_options import PipelineOptions

    from imgpipe.components.common.storage import disk_full, fileio
    from imgpipe.components.image_statistics import (
        analysis_options,
        produce_statistics,
        read_baseline,
    )
    from imgpipe.pipelines.beam_args import local_beam_args

    drift_baseline = None
    if args.baseline is not None:
        if not fileio.exists(args.baseline):
            raise FileNotFoundError(_no_baseline(args.baseline))
        drift_baseline = read_baseline(args.baseline)
    options = analysis_options(args.image_size, args.crop_fraction, config)
    pipeline_args = local_beam_args(args.extra_args)
    with tempfile.TemporaryDirectory(prefix="imgpipe-stats-") as work:
        try:
            return produce_statistics(
                args.examples_dir,
                None,
                work,
                options,
                config,
                make_pipeline=lambda: beam.Pipeline(options=PipelineOptions(pipeline_args)),
                baseline=drift_baseline,
            )
        except Exception as e:
            if disk_full.is_out_of_space(e):
                raise disk_full.explain(e, "imgpipe stats", f"{work} (TMPDIR)") from e
            raise


def _write_outputs(
    args: argparse.Namespace, outputs: list[str], produced: ProducedStatistics
) -> None:
    """The HTML report, then the statistics' JSON (if asked for)."""
    from imgpipe.components.common.formats import image_stats
    from imgpipe.components.common.storage import disk_full, fileio

    try:
        for path in outputs:
            if os.path.dirname(path):
                fileio.makedirs(os.path.dirname(path))
        # The report first: the statistics, which readers act on, come whole and last.
        fileio.write_atomic(args.html, produced.html.encode())
        if args.json is not None:
            image_stats.write_file(args.json, produced.stats)
    except Exception as e:
        if disk_full.is_out_of_space(e):
            raise disk_full.explain(e, "imgpipe stats", args.json or args.html) from e
        raise


def print_summary(stats: ImageStats, json_path: str | None, html_path: str) -> None:
    for split, s in stats.splits.items():
        pixels = s.pixels
        mean = ", ".join(f"{v:.3f}" for v in pixels.mean) if pixels else "n/a"
        std = ", ".join(f"{v:.3f}" for v in pixels.std) if pixels else "n/a"
        print(f"{split:10s} {s.images} images  mean [{mean}]  std [{std}]")
    print(f"leakage    {stats.leakage.groups} groups of identical images across splits")
    drift = stats.drift
    if drift is not None:
        if drift.checked:
            found = [c.metric for c in drift.checks if c.drifted]
            if drift.classes_added or drift.classes_removed:
                found.append("classes changed")
            print(f"drift      {', '.join(found) or 'none'} (baseline {drift.baseline_uri})")
        else:
            print(f"drift      not checked: {drift.reason}")
    if stats.anomalies:
        print(f"anomalies  {len(stats.anomalies)}:")
        for anomaly in stats.anomalies:
            print(f"  - [{anomaly.code}] {printable(anomaly.message)}")
    else:
        print("anomalies  none")
    if json_path is not None:
        print(f"json       {json_path}")
    print(f"report     {html_path}")
