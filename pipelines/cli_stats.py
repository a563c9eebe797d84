"""`imgpipe stats EXAMPLES_DIR`: ImageStatistics outside TFX (JSON and HTML report)."""

from __future__ import annotations

import argparse
import os

DEFAULT_JSON = "image_stats.json"
DEFAULT_HTML = "report.html"


def register(subparsers: argparse._SubParsersAction) -> None:
    parser = subparsers.add_parser(
        "stats",
        help="image statistics, data checks and an HTML report of converted Examples",
        description="Compute the exact pixel mean and std at the Trainer's resolution, "
                    "size, format and label distributions, duplicates and train/eval "
                    "leakage of EXAMPLES_DIR (the output of ImageExampleGen or `imgpipe "
                    "convert`), and draw them in a self-contained HTML report. Arguments "
                    "not listed here (--runner, --direct_num_workers, ...) go to Apache Beam.")
    parser.add_argument("examples_dir", help="Examples folder with Split-<name>/ and "
                                             "label_map.json (local, gs:// or s3://)")
    parser.add_argument("--json", default=DEFAULT_JSON, metavar="FILE",
                        help=f"where to write the statistics (default {DEFAULT_JSON})")
    parser.add_argument("--html", default=DEFAULT_HTML, metavar="FILE",
                        help=f"where to write the report (default {DEFAULT_HTML})")
    parser.add_argument("--image-size", type=int, default=224,
                        help="the Trainer's input side (default 224)")
    parser.add_argument("--crop-fraction", type=float, default=None,
                        help="eval center-crop fraction (default: the Trainer's, 0.875)")
    parser.add_argument("--native", action="store_true",
                        help="also compute pixel statistics at the stored size (decodes twice)")
    parser.add_argument("--thumbnails", type=int, default=8, help="thumbnails per class")
    parser.add_argument("--leakage-threshold", type=float, default=0.0,
                        help="tolerated fraction of a split's images copied in another split")
    parser.add_argument("--min-supported-fraction", type=float, default=0.99,
                        help="smallest tolerated fraction of usable images")
    parser.add_argument("--fail-on-anomalies", action="store_true",
                        help="exit with status 1 when anomalies are found")
    parser.set_defaults(handler=run, accepts_extra_args=True)


def run(args: argparse.Namespace) -> int:
    import tempfile

    import apache_beam as beam
    from apache_beam.options.pipeline_options import PipelineOptions

    from components.common import artifacts
    from components.common.preprocessing import DEFAULT_CROP_FRACTION
    from components.image_statistics import spec
    from components.image_statistics.executor import options_from_properties
    from components.image_statistics.produce import produce, write_text
    from pipelines.cli_convert import beam_args

    options, thresholds = options_from_properties({
        spec.IMAGE_SIZE_KEY: args.image_size,
        spec.CROP_FRACTION_KEY: (DEFAULT_CROP_FRACTION if args.crop_fraction is None
                                 else args.crop_fraction),
        spec.SAMPLE_THUMBNAILS_KEY: args.thumbnails,
        spec.NATIVE_RESOLUTION_KEY: int(args.native),
        spec.LEAKAGE_THRESHOLD_KEY: args.leakage_threshold,
        spec.MIN_SUPPORTED_FRACTION_KEY: args.min_supported_fraction,
    })
    pipeline_args = beam_args(args.extra_args)
    with tempfile.TemporaryDirectory(prefix="imgpipe-stats-") as work:
        produced = produce(
            args.examples_dir, work, options, thresholds,
            make_pipeline=lambda: beam.Pipeline(options=PipelineOptions(pipeline_args)))
    for path in (args.json, args.html):
        parent = os.path.dirname(path)
        if parent:
            os.makedirs(parent, exist_ok=True)
    artifacts.write_json(args.json, produced.stats)
    write_text(args.html, produced.html)
    print_summary(produced.stats, args.json, args.html)
    return 1 if produced.anomalies and args.fail_on_anomalies else 0


def print_summary(stats: dict, json_path: str, html_path: str) -> None:
    for split, s in stats["splits"].items():
        pixels = s["pixels"]
        mean = ", ".join(f"{v:.3f}" for v in pixels["mean"]) if pixels else "n/a"
        std = ", ".join(f"{v:.3f}" for v in pixels["std"]) if pixels else "n/a"
        print(f"{split:10s} {s['images']} images  mean [{mean}]  std [{std}]")
    leakage = stats["leakage"]
    print(f"leakage    {leakage['groups']} groups of identical images across splits")
    if stats["anomalies"]:
        print(f"anomalies  {len(stats['anomalies'])}:")
        for anomaly in stats["anomalies"]:
            print(f"  - [{anomaly['code']}] {anomaly['message']}")
    else:
        print("anomalies  none")
    print(f"json       {json_path}")
    print(f"report     {html_path}")
