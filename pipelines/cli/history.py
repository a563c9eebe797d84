"""`imgpipe history --serving-dir DIR`: what each run decided about a serving folder.

One line per decision, oldest first (serving_history.py keeps them): the span, the time,
pushed / refused / stopped / rollback / failed, the version, the version serving after it, the
served model's accuracy on the reference set, and the reason in a few words. `--json`
prints the same for machines; `--html FILE` also draws it (history_view.py). A damaged
record is a `warning:` line on stderr, never a failure.
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import posixpath
import sys

from imgpipe.pipelines.cli.errors import UserError


def register(subparsers: argparse._SubParsersAction) -> None:
    parser = subparsers.add_parser(
        "history",
        help="what each run decided about a serving folder: pushed, refused, stopped, failed",
        description="Print one line per run decision recorded in the serving folder, "
        "oldest first: the span, the time (UTC), the decision (pushed, refused, stopped "
        "by the data gate, rollback, failed), the version, the version serving after it, the "
        "served model's accuracy on the reference set and the reason. A damaged record "
        "is named on stderr and passed over.",
    )
    parser.add_argument(
        "--serving-dir",
        required=True,
        metavar="DIR",
        help="the folder the Pusher pushes to (serving_dir; local, gs:// or s3://)",
    )
    parser.add_argument(
        "--json",
        action="store_true",
        help="print the decisions and the damaged records as JSON instead",
    )
    parser.add_argument(
        "--html",
        metavar="FILE",
        help="also write a self-contained HTML page charting the served accuracy over "
        "the spans, every decision marked (local, gs:// or s3://)",
    )
    parser.set_defaults(handler=run)


def run(args: argparse.Namespace) -> int:
    # The file seam loads TensorFlow: not for `imgpipe --help`.
    from imgpipe.components.common.formats import serving_history
    from imgpipe.components.common.storage import fileio
    from imgpipe.pipelines.cli import history_view

    serving_dir = args.serving_dir
    if not fileio.isdir(serving_dir):
        raise UserError(
            f"--serving-dir {serving_dir}: no such serving folder; give the folder the "
            "Pusher pushes to (serving_dir)"
        )
    decisions, problems = serving_history.read(serving_dir)
    for problem in problems:
        print(f"warning: {problem}", file=sys.stderr)
    if args.html:
        parent = posixpath.dirname(args.html)
        if parent:
            fileio.makedirs(parent)
        fileio.write_atomic(args.html, history_view.page(serving_dir, decisions, problems).encode())
    stalled = serving_history.stall(decisions)
    if args.json:
        document = {
            "decisions": [dataclasses.asdict(d) for d in decisions],
            "problems": problems,
            "stalled": dataclasses.asdict(stalled) if stalled else None,
        }
        print(json.dumps(document, indent=2, sort_keys=True))
        return 0
    if not decisions:
        print(f"no decisions recorded in {serving_dir} yet")
    else:
        print(history_view.header())
        for decision in decisions:
            print(history_view.line(decision))
    if stalled:
        print(stalled.describe())
    if args.html:
        print(f"chart: {args.html}")
    return 0
