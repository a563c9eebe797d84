"""`imgpipe`: the one command line that fronts everything a user runs by hand.

One module per command (convert, stats, run, kfp, version); each registers its parser
and imports its heavy dependencies lazily, so `imgpipe --help` is quick. Flag defaults
come from the components' own option types, never from literals here.
"""

from __future__ import annotations

import argparse
import logging
import os
import sys
from collections.abc import Sequence

from imgpipe.pipelines import termination


def build_parser() -> argparse.ArgumentParser:
    from imgpipe.pipelines.cli import convert, kfp, run, stats, version

    parser = argparse.ArgumentParser(
        prog="imgpipe",
        description="Folders of labelled images to a trained, servable Keras model, "
        "with TFX and Kubeflow Pipelines.",
    )
    subparsers = parser.add_subparsers(title="subcommands", metavar="COMMAND")
    for module in (version, convert, run, kfp, stats):
        module.register(subparsers)
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
        with termination.stop_on_signals():
            return args.handler(args)
    except termination.Terminated as e:
        print(
            f"imgpipe: error: stopped by {e.signal_name} before finishing; run the command "
            "again to finish",
            file=sys.stderr,
        )
        return e.exit_code
    except (ValueError, FileNotFoundError) as e:
        if os.environ.get("IMGPIPE_DEBUG"):
            raise
        print(f"imgpipe: error: {e}", file=sys.stderr)
        return 1


if __name__ == "__main__":
    sys.exit(main())
