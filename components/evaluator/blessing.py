"""The blessing decision: pure functions of the two models' metrics and the config.

No TensorFlow: the executor measures, this decides, and the tests check every rule on
hand-made metrics.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Sequence

from imgpipe.components.common.formats.reference_sets import NEW_SPLIT
from imgpipe.components.evaluator import evaluation as ev
from imgpipe.components.evaluator import paired
from imgpipe.components.evaluator.config import EvaluatorConfig

# Whom a candidate is held against, in check names and reasons.
CHAMPION = "champion"
RECORD_HOLDER = "record holder"


def majority(metrics: ev.ModelMetrics) -> tuple[str | None, float]:
    """The eval split's largest class and its share: the accuracy of always guessing it."""
    if not metrics.examples:
        return None, 0.0
    largest = max(metrics.per_class, key=lambda c: c.examples)  # the first, on a tie
    return largest.label, largest.examples / metrics.examples


def binomial_upper_tail_count(n: int, p: float, significance: float) -> int:
    """The fewest correct answers out of n that guessing at rate p reaches with
    probability at most `significance`: smallest k with P(Binomial(n, p) >= k) <= it."""
    if n == 0 or significance <= 0:
        return 0
    if p <= 0:
        return 1
    if p >= 1:
        return n + 1
    tail = 0.0
    for k in range(n, -1, -1):
        tail += paired.binomial_pmf(n, k, p)
        if tail > significance:
            return k + 1
    return 0


def required_accuracy(metrics: ev.ModelMetrics, config: EvaluatorConfig) -> float:
    """The floor: the threshold, the majority rate plus the margin, and the significance
    bound, whichever is highest."""
    _, rate = majority(metrics)
    by_test = binomial_upper_tail_count(metrics.examples, rate, config.significance)
    by_test_rate = by_test / metrics.examples if metrics.examples else 0.0
    return min(max(config.accuracy_threshold, rate + config.majority_margin, by_test_rate), 1.0)


def decides_floor(metrics: ev.ModelMetrics, config: EvaluatorConfig) -> bool:
    """Whether these images can tell a model above the floor from guessing: a perfect
    score on them is significant at `config.significance` (on 3 images of 3 classes it
    is not, and the floor would ask for all 3)."""
    _, rate = majority(metrics)
    return binomial_upper_tail_count(metrics.examples, rate, config.significance) <= max(
        metrics.examples - 1, 0
    )


def floor_evidence(
    candidate: ev.ModelMetrics, comparisons: Sequence[ev.Comparison], config: EvaluatorConfig
) -> tuple[ev.ModelMetrics, str]:
    """The images the floor is judged on: the new split, or, where it is too small to
    decide (decides_floor), the new split and every other set the candidate was scored
    on (each image unseen in training), pooled by class; and a note saying so."""
    if decides_floor(candidate, config):
        return candidate, ""
    pooled = {c.label: c for c in candidate.per_class}
    used = []
    for comparison in comparisons:
        if comparison.name == NEW_SPLIT or comparison.candidate is None:
            continue
        used.append(comparison.name)
        for c in comparison.candidate.per_class:
            mine = pooled.get(c.label, ev.ClassMetrics(c.label, 0, 0, 0))
            pooled[c.label] = ev.ClassMetrics(
                c.label,
                mine.examples + c.examples,
                mine.correct + c.correct,
                mine.predicted + c.predicted,
            )
    if not used:
        return candidate, ""
    return ev.ModelMetrics.of(tuple(pooled.values())), (
        f" on {NEW_SPLIT} and {', '.join(used)} pooled: {NEW_SPLIT}'s "
        f"{candidate.examples} images alone cannot decide it"
    )


def _floor_checks(
    metrics: ev.ModelMetrics, config: EvaluatorConfig, floor_metrics: ev.ModelMetrics, on: str = ""
) -> list[ev.Check]:
    present = sum(1 for c in metrics.per_class if c.examples)
    label, rate = majority(floor_metrics)
    floor = required_accuracy(floor_metrics, config)
    return [
        ev.Check(
            "eval_examples",
            metrics.examples > 0 and present > 1,
            f"the eval split has {metrics.examples} images in {present} classes"
            + ("" if present > 1 else "; blessing needs at least 2 classes to tell apart"),
        ),
        ev.Check(
            "floor",
            floor_metrics.accuracy >= floor,
            f"accuracy {floor_metrics.accuracy:.4f} vs floor {floor:.4f} (threshold "
            f"{config.accuracy_threshold:.4f}; always answering {label!r} scores "
            f"{rate:.4f}, plus margin {config.majority_margin:.4f}; significance "
            f"{config.significance}){on}",
        ),
        ev.Check(
            "predicts_several_classes",
            metrics.predicted_classes > 1,
            f"predicts {metrics.predicted_classes} of {len(metrics.per_class)} classes",
        ),
    ]


def _champion_checks(
    comparison: ev.Comparison,
    config: EvaluatorConfig,
    classes_added: bool = False,
    against: str = CHAMPION,
) -> list[ev.Check]:
    """Candidate against champion (or the record holder) on one set: paired image by
    image when the pairs were recorded, else (an evaluation of version 2) on the two
    accuracies."""
    if comparison.paired is not None:
        return _paired_checks(comparison, config, classes_added, against)
    assert comparison.candidate is not None and comparison.champion is not None
    return _unpaired_checks(comparison.candidate, comparison.champion, config, comparison.name)


def _paired_checks(
    comparison: ev.Comparison, config: EvaluatorConfig, classes_added: bool, against: str
) -> list[ev.Check]:
    """The two rules of paired.py on the set and on each class. With a class added, the
    old classes are refused only when significantly worse: a new class takes some of the
    images between it and its neighbours, by design, so the margin would refuse every
    model that learns one."""
    assert comparison.paired is not None
    on = comparison.name if against == CHAMPION else f"{comparison.name} against {against}"
    margin_significance = 0.0 if classes_added else config.margin_significance
    overall = paired.judge(
        comparison.paired,
        config.tolerance,
        config.paired_significance,
        margin_significance,
    )
    checks = [
        ev.Check(
            f"not_worse_than_{against.replace(' ', '_')}:{comparison.name}",
            not overall.worse,
            f"on {on} ({comparison.paired.images} images): {overall.detail}",
        )
    ]
    judged = [c for c in comparison.paired_by_class if c.paired.images >= config.min_class_examples]
    # Each class is one more chance to refuse by luck: the levels are shared (Bonferroni).
    for class_paired in judged:
        verdict = paired.judge(
            class_paired.paired,
            config.class_tolerance,
            config.paired_significance / len(judged),
            margin_significance / len(judged),
        )
        checks.append(
            ev.Check(
                f"class_not_worse:{on}:{class_paired.label}".replace(" ", "_"),
                not verdict.worse,
                f"on {on}: class {class_paired.label!r} ({class_paired.paired.images} "
                f"images): {verdict.detail}",
            )
        )
    return checks


def with_tests(comparison: ev.Comparison, config: EvaluatorConfig) -> ev.Comparison:
    """The comparison with its paired test's name, p-value and margin filled in."""
    if comparison.paired is None:
        return comparison
    return dataclasses.replace(
        comparison,
        test=paired.TEST_NAME,
        p_value=round(comparison.paired.p_worse, 6),
        margin=config.tolerance,
    )


def too_small(comparison: ev.Comparison, config: EvaluatorConfig) -> bool:
    """No outcome on this set's discordant images could have refused the candidate."""
    if comparison.paired is None:
        return False
    level = max(config.paired_significance, config.margin_significance)
    return comparison.paired.discordant < paired.fewest_discordant(level)


def _unpaired_checks(
    candidate: ev.ModelMetrics, champion: ev.ModelMetrics, config: EvaluatorConfig, on: str
) -> list[ev.Check]:
    checks = [
        ev.Check(
            f"not_worse_than_champion:{on}",
            candidate.accuracy >= champion.accuracy - config.tolerance,
            f"on {on} ({candidate.examples} images): accuracy {candidate.accuracy:.4f} vs "
            f"champion {champion.accuracy:.4f} (tolerance {config.tolerance:.4f})",
        )
    ]
    theirs = champion.by_label()
    for ours in candidate.per_class:
        if ours.examples < config.min_class_examples or ours.label not in theirs:
            continue
        mine, other = ours.recall or 0.0, theirs[ours.label].recall or 0.0
        checks.append(
            ev.Check(
                f"class_not_worse:{on}:{ours.label}",
                mine >= other - config.class_tolerance,
                f"on {on}: class {ours.label!r} ({ours.examples} images): recall "
                f"{mine:.4f} vs champion {other:.4f} (tolerance {config.class_tolerance:.4f})",
            )
        )
    return checks


def _new_class_checks(
    candidate: ev.ModelMetrics, champion: ev.Champion, config: EvaluatorConfig
) -> list[ev.Check]:
    """A class the champion lacks has nothing to be compared with: its own floor."""
    ours = candidate.by_label()
    checks = []
    for label in champion.classes_added:
        metrics = ours.get(label)
        floor = f"floor {config.new_class_min_recall:.4f} (new_class_min_recall)"
        if metrics is None or metrics.recall is None:
            passed, seen = False, "no image in the new eval split to judge it on"
        else:
            passed = metrics.recall >= config.new_class_min_recall
            seen = f"recall {metrics.recall:.4f} on {metrics.examples} new eval images"
        checks.append(
            ev.Check(f"new_class:{label}", passed, f"new class {label!r}: {seen} vs {floor}")
        )
    return checks


def comparisons_of(
    champion: ev.Champion, candidate_on_split: ev.ModelMetrics
) -> tuple[ev.Comparison, ...]:
    """The new split's comparison when the caller measured only that (the metrics of
    both models on the same classes)."""
    if champion.status != ev.COMPARED or champion.metrics is None:
        return ()
    return (
        ev.Comparison(
            NEW_SPLIT,
            "",
            True,
            "",
            tuple(c.label for c in champion.metrics.per_class),
            candidate_on_split,
            champion.metrics,
        ),
    )


def becomes_record(
    champion: ev.Champion,
    record: ev.Champion | None,
    comparisons: Sequence[ev.Comparison],
    record_comparisons: Sequence[ev.Comparison],
) -> tuple[bool, str]:
    """Whether a blessed candidate becomes the record holder once pushed, and why: it is
    the first model compared with nothing, its classes differ from the record holder's
    (the record moves with the class set), or on today's sets it got at least as many
    images right, image by image, as the record holder (the champion, when that is it)."""
    held = record if record is not None and record.status == ev.COMPARED else champion
    sets = record_comparisons if held is record else comparisons
    if held.status != ev.COMPARED:
        return True, "nothing to compare with: the first record"
    if held.classes_added or held.classes_removed:
        return True, f"the class set moved from record {held.version}'s"
    pooled = sum(
        (c.paired for c in sets if c.compared and c.paired is not None), paired.Paired(0, 0, 0)
    )
    if pooled.candidate_only >= pooled.champion_only:
        return True, (
            f"at least as good as {held.version} on today's sets ({pooled.candidate_only} "
            f"images it alone got right, {pooled.champion_only} the other alone)"
        )
    return False, (
        f"below record {held.version} on today's sets ({pooled.candidate_only} images it "
        f"alone got right, {pooled.champion_only} the record alone), within the margin"
    )


def decide(
    candidate: ev.ModelMetrics,
    champion: ev.Champion,
    config: EvaluatorConfig,
    comparisons: Sequence[ev.Comparison] | None = None,
    record: ev.Champion | None = None,
    record_comparisons: Sequence[ev.Comparison] = (),
) -> ev.Decision:
    """Blessed when every check passes; the reason names the first that failed.

    Args:
      candidate: the candidate's metrics on the new eval split, every class.
      champion: the champion, or why there is none.
      config: the rules.
      comparisons: both models on each evaluation set; default the new split alone,
        from champion.metrics (which must then be on the candidate's classes).
      record: the record holder when it is another model than the champion: the
        candidate is held to it by the same rules, so drops never add up.
      record_comparisons: the candidate against it on each set.
    """
    if comparisons is None:
        comparisons = comparisons_of(champion, candidate)
    floor_metrics, floor_on = floor_evidence(candidate, comparisons, config)
    checks = _floor_checks(candidate, config, floor_metrics, floor_on)
    compared = champion.status == ev.COMPARED
    if compared and champion.same_training:
        checks.append(
            ev.Check(
                "something_new",
                False,
                f"nothing new: trained on the same data with the same settings as champion "
                f"{champion.version}, so pushing it would only replace it with its twin",
            )
        )
    if compared:
        for comparison in comparisons:
            if comparison.compared and comparison.candidate and comparison.champion:
                checks += _champion_checks(comparison, config, bool(champion.classes_added))
        checks += _new_class_checks(candidate, champion, config)
    held_to_record = record is not None and record.status == ev.COMPARED
    if held_to_record:
        assert record is not None
        for comparison in record_comparisons:
            if comparison.compared and comparison.candidate and comparison.champion:
                checks += _champion_checks(
                    comparison, config, bool(record.classes_added), RECORD_HOLDER
                )
    failed = [c for c in checks if not c.passed]
    if failed:
        return ev.Decision(False, f"not blessed: {failed[0].detail}", tuple(checks))
    if compared:
        on = [c.name for c in comparisons if c.compared]
        skipped = [c.name for c in comparisons if not c.compared]
        # The note names damaged pushes passed over to find the champion, and classes
        # added or removed.
        noted = f" ({champion.note})" if champion.note else ""
        against = (
            f"not worse than champion {champion.version}{noted} on {', '.join(on) or 'nothing'}"
        )
        if skipped:
            against += f" ({', '.join(skipped)} skipped)"
        small = [c.name for c in comparisons if c.compared and too_small(c, config)]
        if small:
            against += f" ({', '.join(small)} too small to decide)"
        if champion.classes_added:
            against += f"; new classes {list(champion.classes_added)} above their floor"
        if held_to_record:
            assert record is not None
            on_record = [c.name for c in record_comparisons if c.compared]
            against += (
                f"; not worse than record holder {record.version} on "
                f"{', '.join(on_record) or 'nothing'}"
            )
    else:
        against = f"floor alone: {champion.note}"
    floor = next(c for c in checks if c.name == "floor")
    return ev.Decision(True, f"blessed: {floor.detail}; {against}", tuple(checks))
