"""The run summary both runners print (imgpipe run local, imgpipe kfp run-local): where
the model, the reports and the statistics are, and what each step decided, read from a
run's outputs (local_runner.RunResult)."""

from __future__ import annotations

import os
from typing import Any

from tfx.types import standard_component_specs as keys

from imgpipe.components.common.formats.layout import REPORT_FILE
from imgpipe.pipelines import component_ids as ids
from imgpipe.pipelines import pipeline as pl
from imgpipe.pipelines.config import PipelineConfig
from imgpipe.pipelines.local_runner import PUSHED, PUSHED_DESTINATION, SPAN, RunResult


def summary_lines(result: RunResult, config: PipelineConfig) -> list[str]:
    """The closing lines of a run: where the model, the reports and the statistics are."""
    from imgpipe.components.common.storage import fileio, serving_lock

    def report_in(uri: str | None) -> str | None:
        if not uri:
            return None
        report = os.path.join(uri, REPORT_FILE)
        return report if fileio.exists(report) else uri

    pushed = result.artifact(ids.PUSHER, keys.PUSHED_MODEL_KEY)
    pushed_to = (
        pushed.properties.get(PUSHED_DESTINATION)
        if pushed and pushed.properties.get(PUSHED)
        else None
    )
    refused = pushed.properties.get(serving_lock.REFUSED_PROPERTY) if pushed else None
    cleared = pushed.properties.get(serving_lock.CLEARED_PROPERTY) if pushed else None
    not_pushed = refused or f"not pushed (see {config.serving_dir})"
    examples = result.artifact(ids.EXAMPLE_GEN, keys.EXAMPLES_KEY)
    span = examples.properties.get(SPAN) if examples else None
    lines = [
        f"data                 {config.data_root}"
        + (f" (span {span})" if span is not None else ""),
        *conversion_lines(examples.uri if examples else None),
        *champion_lines(result.uri(ids.CHAMPION, pl.CHAMPION_KEY)),
        f"model (trained)      {result.uri(ids.TRAINER, keys.MODEL_KEY) or 'not produced'}",
        *drift_lines(result.uri(ids.IMAGE_STATISTICS, keys.STATISTICS_KEY)),
        *label_audit_lines(result.uri(ids.IMAGE_STATISTICS, keys.STATISTICS_KEY)),
        *training_lines(result.uri(ids.TRAINER, keys.MODEL_RUN_KEY)),
        *evaluation_lines(
            result.uri(ids.EVALUATOR, keys.EVALUATION_KEY), config.evaluator.paired_significance
        ),
        f"model (served)       {pushed_to or not_pushed}",
        *([] if pushed_to else stall_lines(config.serving_dir)),
        *([f"serving folder       {cleared}"] if cleared else []),
        f"image report         {report_in(result.uri(ids.IMAGE_STATISTICS, keys.STATISTICS_KEY))}",
        f"statistics (TFDV)    {result.uri(ids.STATISTICS_GEN, keys.STATISTICS_KEY)}",
        f"statistics (images)  {result.uri(ids.IMAGE_STATISTICS, keys.STATISTICS_KEY)}",
        f"anomalies            {result.uri(ids.EXAMPLE_VALIDATOR, keys.ANOMALIES_KEY)}",
        f"metadata (SQLite)    {result.metadata_path}",
    ]
    if result.retention:
        lines.append(f"retention            {result.retention}")
    states = sorted({n.state for n in result.nodes.values()})
    lines.append(
        f"executions           {', '.join(states)}"
        + ("  (served from TFX's cache)" if result.all_cached else "")
    )
    return lines


def stall_lines(serving_dir: str) -> list[str]:
    """The runs that pushed nothing since the last push, when the schedule has stalled
    (serving_history.stall); a history that cannot be read says nothing here."""
    from imgpipe.components.common.formats import serving_history

    try:
        decisions, _ = serving_history.read(serving_dir)
    except OSError:
        return []
    stalled = serving_history.stall(decisions)
    if stalled is None:
        return []
    return [f"stalled              {stalled.describe().removeprefix('stalled: ')}"]


def training_lines(model_run_uri: str | None) -> list[str]:
    """How the model was trained: warm start and phases, from training_summary.json."""
    from imgpipe.components.trainer import (
        TRAINING_RESUMED,
        WARM_START_BACKBONE_ONLY,
        WARM_START_FULL,
        read_training_summary,
    )

    trained = read_training_summary(model_run_uri)
    if trained is None:
        return []
    phases = ", ".join(
        f"{p.name} {p.epochs_run}/{p.epochs} epochs at {p.peak_learning_rate:g}"
        for p in trained.phases
    )
    from imgpipe.components.common.images import label_audit

    audited = (
        [f"label audit (eval)   {label_audit.describe(trained.label_audit)}"]
        if trained.label_audit is not None
        else []
    )
    window = [f"spans trained        {trained.window}"] if trained.window else []
    if trained.not_trained:
        return [*window, f"training             not trained: {trained.not_trained}", *audited]
    # A warm start's weights are the champion's, whatever the configured weights say.
    warm = trained.warm_start in (WARM_START_FULL, WARM_START_BACKBONE_ONLY)
    weights = "the champion's (warm start)" if warm else trained.weights or "none (from scratch)"
    lines = [
        *window,
        f"training             {trained.backbone} at {trained.image_size} px, weights "
        f"{weights}; {phases}",
        *distribution_lines(trained.distribution),
        f"warm start           {trained.warm_start}: {trained.warm_start_note}",
        *audited,
    ]
    if trained.resume.status == TRAINING_RESUMED:
        lines.append(f"preemption           {trained.resume.note}")
    return lines


def distribution_lines(distribution: Any) -> list[str]:
    """How many workers trained, with which strategy (nothing from a summary that
    predates it)."""
    if not distribution.strategy:
        return []
    workers = distribution.workers
    over = f"{workers} workers, {distribution.communication} all-reduce, " if workers > 1 else ""
    return [
        f"distribution         {distribution.strategy}: {over}{distribution.replicas} "
        f"replica{'s' if distribution.replicas > 1 else ''}, global batch "
        f"{distribution.global_batch}"
    ]


def conversion_lines(examples_uri: str | None) -> list[str]:
    """What ImageExampleGen wrote of the span, and the files it skipped, with where each
    one's reason is listed."""
    from imgpipe.components.common.formats import conversion_summary
    from imgpipe.components.common.formats.layout import SKIPPED_FILE

    converted = conversion_summary.read_if_present(examples_uri) if examples_uri else None
    if converted is None:
        return []
    line = (
        f"images               {converted.written} written of {converted.files_seen} files seen"
        f", {converted.skipped} skipped, {converted.ignored} ignored"
    )
    if converted.skipped:
        line += f" (each skipped file and why: {os.path.join(examples_uri or '', SKIPPED_FILE)})"
    return [line]


def champion_lines(champion_uri: str | None) -> list[str]:
    """The one champion this run was judged against, as the ChampionResolver read it."""
    from imgpipe.components.common.formats import champion

    if not champion_uri:
        return []
    try:
        resolved = champion.read(champion_uri)
    except (OSError, ValueError):
        return []
    return [
        f"champion             {resolved.describe()}",
        *(f"serving folder       {note}" for note in resolved.records_note),
    ]


def evaluation_lines(evaluation_uri: str | None, significance: float) -> list[str]:
    """Both models' eval accuracy and the blessing decision, from evaluation.json; each
    set's evidence at the paired test's `significance`."""
    from imgpipe.components.evaluator import read_evaluation

    result = read_evaluation(evaluation_uri)
    if result is None:
        return [f"evaluation           {evaluation_uri or 'not produced'}"]
    champion = result.champion
    if champion.metrics is not None:
        against = f"champion {champion.version}: {champion.metrics.accuracy:.4f}" + (
            f" ({champion.note})" if champion.note else ""
        )
    else:
        against = f"no comparison ({champion.note})"
    lines = [
        f"eval accuracy        {result.candidate.accuracy:.4f} on {result.candidate.examples} "
        f"'{result.eval_split}' images; {against}"
    ]
    if champion.note and champion.metrics is not None:
        lines.append(f"classes              {champion.note}")
    for comparison in result.comparisons:
        lines.append(f"{comparison.name:<20} {comparison_text(comparison, significance)}")
    if result.record is not None:  # the best model served, when it is not the champion
        lines.append(f"record holder        {result.record.version} ({result.record.path})")
        for comparison in result.record_comparisons:
            text = comparison_text(comparison, significance, "record")
            lines.append(f"  {comparison.name:<18} {text}")
    if result.becomes_record:
        lines.append(f"record               once pushed, the record holder: {result.record_reason}")
    return [
        *lines,
        f"blessing             {result.decision.reason}",
        f"evaluation           {evaluation_uri}",
        f"evaluation report    {os.path.join(evaluation_uri or '', REPORT_FILE)}",
    ]


def label_audit_lines(statistics_uri: str | None) -> list[str]:
    """The champion's label audit of this data before training: the flagged fraction,
    the gate and the decision, from image_stats.json."""
    from imgpipe.components.common.formats import image_stats
    from imgpipe.components.common.formats.layout import IMAGE_STATS_FILE
    from imgpipe.components.common.images import label_audit
    from imgpipe.components.common.storage import fileio

    if not statistics_uri or not fileio.exists(os.path.join(statistics_uri, IMAGE_STATS_FILE)):
        return []
    audited = image_stats.read(statistics_uri).label_audit
    return [] if audited is None else [f"label audit          {label_audit.describe(audited)}"]


def comparison_text(comparison: Any, significance: float, other: str = "champion") -> str:
    """Both models' accuracy on one evaluation set, or why they were not compared; the
    second model is the champion, or `other`."""
    scores = []
    if comparison.candidate is not None:
        scores.append(f"candidate {comparison.candidate.accuracy:.4f}")
    if comparison.champion is not None:
        scores.append(f"{other} {comparison.champion.accuracy:.4f}")
    text = ""
    if scores and comparison.candidate is not None:
        text = (
            f"{', '.join(scores)} on {comparison.candidate.examples} images of "
            f"{len(comparison.classes)} classes ({comparison.uri})"
        )
    return "; ".join(filter(None, [text, evidence_text(comparison, significance), comparison.note]))


def evidence_text(comparison: Any, significance: float) -> str:
    """The smallest drop the paired test could see on the set, at paired.POWER and at the
    level the set was judged at (the decision's levels are shared among its sets;
    `significance` for an evaluation that did not record it); "" when the models were not
    compared image by image."""
    from imgpipe.components.evaluator import POWER

    paired = comparison.paired
    level = comparison.level or significance
    visible = paired.smallest_visible_drop(level) if paired is not None else None
    if visible is None or comparison.p_value is None:
        return ""
    return (
        f"a drop of {visible * 100:.1f} points or more would show ({POWER:.0%} power at "
        f"{level:.3g})"
    )


def drift_lines(statistics_uri: str | None) -> list[str]:
    """This data against the served model's training data, from image_stats.json."""
    from imgpipe.components.common.formats import image_stats
    from imgpipe.components.common.formats.layout import IMAGE_STATS_FILE
    from imgpipe.components.common.storage import fileio

    if not statistics_uri or not fileio.exists(os.path.join(statistics_uri, IMAGE_STATS_FILE)):
        return []
    drift = image_stats.read(statistics_uri).drift
    if drift is None:
        return []
    if drift.accepted:
        return [f"drift accepted       {drift.accepted}"]
    if not drift.checked:
        return [f"drift                not checked: {drift.reason}"]
    drifted = [c for c in drift.checks if c.drifted]
    changed = [f"+{c}" for c in drift.classes_added] + [f"-{c}" for c in drift.classes_removed]
    notes = f" ({drift.reason})" if drift.reason else ""
    if not drifted and not changed:
        return [f"drift                none against {drift.baseline_uri}{notes}"]
    found = [f"{c.metric} {c.distance:.3g} > {c.threshold:g} ({c.subject})" for c in drifted]
    return [f"drift                {'; '.join(found + changed)}{notes}"]
