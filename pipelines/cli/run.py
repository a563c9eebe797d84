"""`imgpipe run local` and `imgpipe demo`: the whole pipeline on this machine."""

from __future__ import annotations

import argparse
import dataclasses
import os
from typing import Any

from imgpipe.components.image_example_gen import flat_splits
from imgpipe.pipelines import config as cfg
from imgpipe.pipelines import sample_photos, termination
from imgpipe.pipelines.cli import errors, paths, progress
from imgpipe.pipelines.cli.convert import IMAGE_FOLDER_FIX
from imgpipe.pipelines.cli.errors import NOT_PUSHED_EXIT_CODE, UserError
from imgpipe.pipelines.cli.settings import add_set_argument

# The demo: a few hundred 160-pixel photos and the three-block tiny_cnn at 96 pixels;
# trainer.min_train_steps raises its eight epochs to 38 (304 steps), which reached eval
# accuracy 1.0 (README, "make demo"). MobileNetV3Small from scratch needs far more steps: in the
# same settings, early stopping ended it after 4 epochs with eval accuracy at chance.
# Only what differs from the defaults is set.
DEMO_SETTINGS: dict[str, Any] = {
    "pipeline_name": "imgpipe-demo",
    "trainer": {"backbone": "tiny_cnn", "image_size": 96, "epochs": 8},
    "example_gen": {"output": {"splits": flat_splits(0.2), "num_shards": 1}},
}


def register(subparsers: argparse._SubParsersAction) -> None:
    run = subparsers.add_parser("run", help="run the pipeline")
    targets = run.add_subparsers(title="where", metavar="TARGET")
    local = targets.add_parser(
        "local",
        help="run the whole pipeline here with LocalDagRunner (SQLite MLMD)",
        description="Runs ImageExampleGen to Pusher on this machine. A second run on "
        "unchanged images is served from TFX's cache. Exits 0 when a model was pushed, "
        f"{NOT_PUSHED_EXIT_CODE} when the run finished without pushing one, 1 on an "
        "error (docs/retraining.md).",
    )
    local.add_argument(
        "--data",
        metavar="DIR",
        help="image folder: root/<label>/... or root/<split>/<label>/...; may end in "
        "TFX's span patterns (e.g. /data/span-{SPAN}: the latest span is read); "
        "default: the config's data_root",
    )
    local.add_argument("--config", metavar="FILE", help="pipeline config YAML")
    add_set_argument(local)
    local.add_argument("--pipeline-root", metavar="DIR", help="overrides pipeline_root")
    local.add_argument("--serving-dir", metavar="DIR", help="overrides serving_dir")
    local.add_argument(
        "--accept-drift",
        type=int,
        metavar="SPAN",
        help="accept the data drift of span SPAN, this once: recorded in the statistics "
        "and the summary; other spans are gated as usual, and the new model must still "
        "not be worse than the served one on the data that one was blessed on "
        "(statistics.accept_drift_span)",
    )
    local.add_argument(
        "--accept-label-issues",
        type=int,
        metavar="SPAN",
        help="accept the label audit of span SPAN above its gate, this once (when its "
        "labels are right and the served model has not seen data like it); accepting "
        "drift does not do this (statistics.accept_label_issues_span)",
    )
    local.add_argument(
        "--span",
        type=int,
        metavar="SPAN",
        help="read span SPAN of the --data pattern, and no other (a span an earlier run "
        "left); without it the run reads every span landed since the last one it saw, in "
        "turn",
    )
    progress.add_flag(local)
    local.set_defaults(handler=run_local)

    demo = subparsers.add_parser(
        "demo",
        help="make the sample photo dataset and run the whole pipeline on CPU",
        description="Writes a few hundred real photos (crops of OpenCV's sample images "
        "from Debian's opencv-doc) into WORKDIR/data and runs the pipeline "
        "locally with a small model.",
    )
    demo.add_argument(
        "--workdir",
        default=os.path.join(cfg.DEFAULT_WORK_DIR, "demo"),
        metavar="DIR",
        help="where the photos, the pipeline root and the pushed model go (default %(default)s)",
    )
    demo.add_argument(
        "--per-class",
        type=int,
        default=sample_photos.DEFAULT_PER_CLASS,
        metavar="N",
        help=f"images per class (default %(default)s, {len(sample_photos.CLASSES)} classes)",
    )
    progress.add_flag(demo)
    demo.set_defaults(handler=run_demo)


def run_local(args: argparse.Namespace) -> int:
    data = args.data
    if data is not None and "://" not in data:
        data = os.path.abspath(data)
    settings = list(args.set or [])
    if args.accept_drift is not None:
        settings.append(f"statistics.accept_drift_span={args.accept_drift}")
    if args.accept_label_issues is not None:
        settings.append(f"statistics.accept_label_issues_span={args.accept_label_issues}")
    config = cfg.load(
        args.config,
        settings,
        data_root=data,
        pipeline_root=args.pipeline_root,
        serving_dir=args.serving_dir,
    )
    if args.data is not None:
        origin, data_root = f"--data {args.data}", args.data
    else:
        origin, data_root = f"data_root {config.data_root}", config.data_root
    # What needs nothing loaded first: TensorFlow and TFX take seconds to load.
    require_data(config, origin, data_root)
    paths.require_writable_folder(
        config.pipeline_root,
        f"{'--pipeline-root' if args.pipeline_root else 'pipeline_root'} {config.pipeline_root}",
        "give --pipeline-root a folder this user can write in (or set pipeline_root in the config)",
    )
    check_data(config, origin, data_root)
    check_serving_dir(config.serving_dir)
    return _run_spans(config, args.span, progress.wanted(args))


def _run_spans(config: Any, asked: int | None, bars: bool) -> int:
    """Runs each span the catch-up plan names, oldest first, until one fails; 0 when any
    was pushed."""
    from imgpipe.pipelines.cli import catch_up

    span_plan = catch_up.plan(config.data_root, config.serving_dir, asked)
    for note in span_plan.notes:
        print(f"spans                {note}", flush=True)
    codes = []
    hours = config.run_deadline_hours
    past_deadline = (
        f"the run passed its deadline of {hours:g} h (run_deadline_hours: a run that long is "
        "taken for hung; 0 sets none)"
    )
    for span in span_plan.spans:
        if len(span_plan.spans) > 1:
            print(f"span {span}", flush=True)
        run_config = config if span is None else dataclasses.replace(config, span=span)
        with termination.deadline(hours * 3600, past_deadline):
            codes.append(_run_and_report(run_config, NOT_PUSHED_EXIT_CODE, bars))
    return 0 if 0 in codes else NOT_PUSHED_EXIT_CODE


def failure_reason(error: BaseException) -> str:
    """A failed run's error as its history record says it: the command's one line, or
    why it was stopped."""
    if isinstance(error, termination.Terminated):
        return termination.stop_reason(error.signum)
    return errors.one_line(error).removeprefix(errors.PREFIX)


def check_serving_dir(serving_dir: str) -> None:
    """The serving folder can be made and written, before any step runs: a read-only
    folder or a missing bucket is found in seconds, not after training.

    Raises:
      UserError: one line naming the folder and the fix.
    """
    if not serving_dir:
        return
    from imgpipe.components.common.storage import serving_lock

    try:
        serving_lock.check_writable(serving_dir)
    except serving_lock.ServingDirError as e:
        raise UserError(str(e)) from None


def require_data(config: Any, origin: str, data_root: str) -> str:
    """The checks of `check_data` that need nothing loaded: data_root is set, and a local
    folder without span patterns is a folder. Returns data_root as check_data reads it.

    Raises:
      UserError: one line naming the path and the fix.
    """
    if not config.data_root:
        raise UserError(
            "no image folder: give --data DIR, or set data_root in the config (--config FILE)"
        )
    if "/" not in data_root:  # a folder of the current one: give the pattern a parent
        data_root = f"{os.curdir}/{data_root}"
    if "{" not in data_root:
        paths.require_local_folder(data_root, origin, IMAGE_FOLDER_FIX)
    return data_root


def check_data(config: Any, origin: str, data_root: str) -> str:
    """Checks what a run will read before the pipeline starts: the folder (the latest
    span of a {SPAN}/{VERSION} pattern, resolved as ImageExampleGen's driver resolves
    it) exists and holds images of at least two classes. Returns that folder, and prints
    a warning line for the names beside the spans that the pattern does not take.

    Args:
      config: the run's config.
      origin: where data_root came from, as the user wrote it (`--data DIR`).
      data_root: config.data_root, spelled as the user wrote it.

    Raises:
      UserError: one line naming the path and the fix.
    """
    data_root = require_data(config, origin, data_root)
    from imgpipe.components.image_example_gen import (
        MIN_CLASSES,
        list_images,
        resolve_input_root,
        too_few_classes_message,
    )

    try:
        root = resolve_input_root(data_root)
    except (FileNotFoundError, ValueError) as e:
        raise UserError(f"{origin}{str(e).removeprefix(data_root)}") from None
    for warning in root.warnings:  # names the pattern does not take, beside the spans
        print(f"warning: {origin}{warning.removeprefix(data_root)}")
    folder = root.path
    output = config.example_gen.output
    labels = list_images(folder, output.layout, output.follow_links).labels
    if len(labels) < MIN_CLASSES:
        raise UserError(f"{origin}: {too_few_classes_message(labels)}")
    return folder


def print_step(step: str, event: str, seconds: float | None) -> None:
    """One line as each step of a local run starts and ends: a run is never silent for
    minutes (the conversion of 50,000 photos, a long training). On a terminal, the
    conversion and the image statistics show a progress bar between their two lines
    (cli/progress.py)."""
    took = "" if seconds is None else f" in {seconds:.1f} s"
    print(f"step  {step:<22} {event}{took}", flush=True)


def run_demo(args: argparse.Namespace) -> int:

    workdir = os.path.abspath(args.workdir)
    data_root = os.path.join(workdir, "data")
    counts = sample_photos.make_dataset(data_root, per_class=args.per_class)
    print(
        f"sample data          {data_root}: "
        + ", ".join(f"{n} {name}" for name, n in sorted(counts.items()))
    )
    config = cfg.from_dict(
        {
            **DEMO_SETTINGS,
            "data_root": data_root,
            "pipeline_root": os.path.join(workdir, "pipeline-root"),
            "serving_dir": os.path.join(workdir, "serving"),
            "metadata_path": os.path.join(workdir, "metadata.sqlite"),
        },
        source="demo settings",
    )
    return _run_and_report(config, 0, progress.wanted(args))


def _run_and_report(config, not_pushed: int, bars: bool) -> int:
    """Runs, prints the summary, and returns the exit code: 0 when a model was pushed,
    else `not_pushed` (the demo, rerun from the cache, is not a failure). With `bars`,
    the steps that count their work show a progress bar (cli/progress.py)."""
    from imgpipe.components.image_statistics import (
        DRIFT,
        LABEL_ISSUES,
        LEAKAGE,
        AnomaliesFoundError,
        drift_fix,
        label_issues_fix,
    )
    from imgpipe.pipelines import local_runner, run_summary

    run_id = local_runner.new_run_id()
    try:
        with progress.StepBars(bars, print_step) as announce:
            result = local_runner.run(config, announce=announce, run_id=run_id)
    except AnomaliesFoundError as e:  # the data gate recorded its stop
        codes = {a.code for a in e.anomalies}
        fixes = []
        if codes - {DRIFT, LABEL_ISSUES}:
            fixes.append(
                "fix the data"
                + (
                    " (or raise statistics.leakage_threshold if the copies are intended)"
                    if LEAKAGE in codes
                    else ""
                )
            )
        if DRIFT in codes:
            fixes.append(drift_fix(e.span, config.statistics))
        if LABEL_ISSUES in codes:
            fixes.append(
                "fix the labels of the images the report lists, or, " + label_issues_fix(e.span)
            )
        raise UserError(
            f"ImageStatistics found {len(e.anomalies)} data anomal"
            f"{'y' if len(e.anomalies) == 1 else 'ies'} "
            f"({', '.join(sorted({a.code for a in e.anomalies}))}), so the run stopped "
            f"before training; see {e.report}, then {'; '.join(fixes)}"
        ) from e
    except BaseException as e:
        local_runner.record_failure(config, run_id, failure_reason(e))
        raise
    for line in run_summary.summary_lines(result, config):
        print(line)
    return 0 if result.pushed else not_pushed
