"""`imgpipe`: the one command line that fronts everything a user runs by hand.

Subcommands import their heavy dependencies lazily, so `imgpipe --help` is quick.
"""

from __future__ import annotations

import argparse
import logging
import os
import sys
from collections.abc import Sequence


def _register_version(subparsers: argparse._SubParsersAction) -> None:
    parser = subparsers.add_parser("version", help="print the versions of the stack in use")
    parser.set_defaults(handler=_version)


def _version(args: argparse.Namespace) -> int:
    from importlib import metadata

    for dist in ("tfx-image-pipeline", "tfx", "tensorflow", "tensorflow-data-validation",
                 "apache-beam", "kfp", "kfp-kubernetes", "ml-metadata"):
        try:
            version = metadata.version(dist)
        except metadata.PackageNotFoundError:
            version = "not installed" if dist != "tfx-image-pipeline" else "source checkout"
        print(f"{dist:28s} {version}")
    return 0


def build_parser() -> argparse.ArgumentParser:
    from pipelines import cli_convert, cli_kfp, cli_run, cli_stats

    parser = argparse.ArgumentParser(
        prog="imgpipe",
        description="Folders of labelled images to a trained, servable Keras model, "
                    "with TFX and Kubeflow Pipelines.")
    subparsers = parser.add_subparsers(title="subcommands", metavar="COMMAND")
    for register in (_register_version, cli_convert.register, cli_run.register,
                     cli_kfp.register, cli_stats.register):
        register(subparsers)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    parser = build_parser()
    args, extra = parser.parse_known_args(argv)
    if not hasattr(args, "handler"):
        parser.print_help()
        return 2
    if extra and not getattr(args, "accepts_extra_args", False):
        parser.error(f"unrecognized arguments: {' '.join(extra)}")
    args.extra_args = extra
    if not os.environ.get("IMGPIPE_VERBOSE"):
        # Beam's local workers log every start-up at WARNING; keep the terminal readable.
        logging.getLogger("apache_beam").setLevel(logging.ERROR)
    try:
        return args.handler(args)
    except (ValueError, FileNotFoundError) as e:
        if os.environ.get("IMGPIPE_DEBUG"):
            raise
        print(f"imgpipe: error: {e}", file=sys.stderr)
        return 1


if __name__ == "__main__":
    sys.exit(main())
