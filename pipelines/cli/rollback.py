"""`imgpipe rollback --serving-dir DIR [--to VERSION]`: serve an earlier kept version.

The work is components/common/formats/rollback.py; this prints what it did, and how the
model servers pick it up.
"""

from __future__ import annotations

import argparse
import sys

from imgpipe.components.common.formats import model_config

# How TF Serving learns of it: the flag that sets how often it rereads the file.
POLL_FLAG = "--model_config_file_poll_wait_seconds"


def register(subparsers: argparse._SubParsersAction) -> None:
    parser = subparsers.add_parser(
        "rollback",
        help="serve the previous (or a named) kept version of a serving directory again",
        description="Point the serving directory's model config files "
        f"({model_config.MODEL_CONFIG_FILE}, {model_config.KSERVE_CONFIG_FILE}) at the "
        "newest sound version older than the one served, or at --to VERSION, after "
        "checking every byte of it against its manifest. No version folder changes; "
        "the next retrain is judged against the version served, and a retrain that "
        "judged its model before the rollback pushes nothing.",
    )
    parser.add_argument(
        "--serving-dir",
        required=True,
        metavar="DIR",
        help="the serving directory the Pusher pushes to (local, gs:// or s3://)",
    )
    parser.add_argument(
        "--to",
        type=int,
        metavar="VERSION",
        help="the version to serve (default: the newest sound one older than the served)",
    )
    parser.set_defaults(handler=run)


def run(args: argparse.Namespace) -> int:
    from imgpipe.components.common.formats import rollback

    result = rollback.rollback(args.serving_dir, args.to)
    for passed in result.passed:
        print(
            f"warning: passed over {passed.path}: {passed.status} ({passed.reason})",
            file=sys.stderr,
        )
    if result.warning:
        print(f"warning: {result.warning}", file=sys.stderr)
    if result.was == result.version:
        print(f"{args.serving_dir} already serves {result.version}; its model config files name it")
        return 0
    was = "none" if result.was is None else str(result.was)
    print(
        f"rolled back {args.serving_dir}: serving {result.version} (was {was}). TF Serving "
        f"loads it at its next read of {model_config.MODEL_CONFIG_FILE} ({POLL_FLAG}); "
        "KServe: restart the predictor"
    )
    return 0
