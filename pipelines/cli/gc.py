"""`imgpipe gc`: deletes what a recurring run no longer needs (pipelines/retention.py), as
the end of every local run does; --dry-run lists what would go and why."""

from __future__ import annotations

import argparse
from typing import Any

from imgpipe.pipelines.cli.errors import UserError
from imgpipe.pipelines.cli.settings import add_set_argument


def register(subparsers: Any) -> None:
    gc = subparsers.add_parser(
        "gc",
        help="delete old pushes and artifacts no run needs",
        description="Deletes from the serving folder every version but the served one and "
        "the retention.keep_pushes newest others (a rollback's choices), and the records "
        "of spans past the window; from the pipeline root every artifact that neither the "
        "window, nor TFX's cache of the latest run, nor a run in progress needs (its MLMD "
        "rows stay, marked DELETED), TFX's records of finished steps, the reports of stopped "
        "runs but the retention.keep_stop_reports newest, and the folders of earlier Kubeflow "
        "runs recorded in the serving folder but the Examples the window keeps. Every run "
        "ends with the same collection (retention.enabled).",
    )
    gc.add_argument("--config", metavar="FILE", help="pipeline config YAML")
    add_set_argument(gc)
    gc.add_argument("--pipeline-root", metavar="DIR", help="overrides pipeline_root")
    gc.add_argument("--serving-dir", metavar="DIR", help="overrides serving_dir")
    gc.add_argument("--dry-run", action="store_true", help="list what would go, and why")
    gc.set_defaults(handler=run)


def run(args: argparse.Namespace) -> int:
    from imgpipe.pipelines import config as cfg
    from imgpipe.pipelines import retention
    from imgpipe.pipelines.collect import collect

    config = cfg.load(
        args.config,
        list(args.set or []),
        pipeline_root=args.pipeline_root,
        serving_dir=args.serving_dir,
    )
    try:
        collected = collect(config, dry_run=args.dry_run)
    except retention.NotAServingFolder as e:
        raise UserError(f"gc refused: {e}") from None
    verb = "would delete" if args.dry_run else "deleted"
    for removal in collected.plan.removals:
        print(f"{verb}  {removal.path}: {removal.reason}")
    for line in collected.plan.kept:
        print(f"keep  {line}")
    for problem in collected.problems:
        print(f"warning: {problem}")
    print(f"gc  {collected.summary()}")
    return 1 if collected.problems else 0
