"""The --set flag of the commands that load a pipeline config (run local, kfp *)."""

from __future__ import annotations

import argparse


def add_set_argument(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--set",
        action="append",
        default=[],
        metavar="SECTION.KEY=VALUE",
        help="a config setting over the file's, e.g. evaluator.tolerance=0.02 or "
        "statistics.accept_drift_span=6; repeatable",
    )
