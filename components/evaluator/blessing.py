"""The blessing decision: pure functions of the two models' metrics and the config.

No TensorFlow: the executor measures, this decides, and the tests check every rule on
hand-made metrics.

One decision, one false-alarm rate. A candidate is held to the champion (and to the
record holder when it is another model) on every set it was scored on, and on each class
of each set: each of those tests is one more chance to refuse an equally good candidate
by luck. So the decision's levels are shared among them (Bonferroni): each comparison
that could refuse at all (can_refuse) gets paired_significance / m and
margin_significance / m of m such comparisons, and within a set the whole set and its
classes split that again. McNemar's exact test then refuses a candidate as good as the
model it is held to at most paired_significance of the time for the whole decision,
whatever the sets' sizes; the margin rule adds its share only on sets whose noise is
near the margin (benchmarks/equal_models.py measures the two together).
"""

from __future__ import annotations

import dataclasses
import math
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


def floor_pass_rate(metrics: ev.ModelMetrics, config: EvaluatorConfig, accuracy: float) -> float:
    """How often a model right on each image with probability `accuracy` reaches the
    floor of these images (required_accuracy): the floor's power."""
    needed = math.ceil(required_accuracy(metrics, config) * metrics.examples - 1e-9)
    return paired.binomial_tail(metrics.examples, needed, accuracy)


def decides_floor(
    metrics: ev.ModelMetrics, config: EvaluatorConfig, elsewhere: ev.ModelMetrics | None = None
) -> bool:
    """Whether these images alone judge the floor.

    They cannot when a perfect score on them is not significant at `config.significance`
    (on 3 images of 3 classes it is not, and the floor would ask for all 3). A pass on
    them is a pass. A failure counts alone only where a model as accurate as the
    candidate is on the other unseen images (`elsewhere`) would reach the floor at least
    1 - paired_significance of the time: on 7 images of 5 classes the floor asks for 6,
    which a model right 85% of the time misses 28% of the time, so there a failure is
    judged again on every unseen image pooled. A candidate much worse on the new split
    than elsewhere (a grey span, a model right on 4 of 16 grey images and on most colour
    ones) still fails at a floor its split can decide.
    """
    _, rate = majority(metrics)
    if binomial_upper_tail_count(metrics.examples, rate, config.significance) > max(
        metrics.examples - 1, 0
    ):
        return False
    if elsewhere is None or not elsewhere.examples:
        return True
    if metrics.accuracy >= required_accuracy(metrics, config):
        return True
    return floor_pass_rate(metrics, config, elsewhere.accuracy) >= 1 - config.paired_significance


def _pooled(metrics: Sequence[ev.ModelMetrics]) -> ev.ModelMetrics:
    """Metrics on several sets' images, class by class."""
    pooled: dict[str, ev.ClassMetrics] = {}
    for one in metrics:
        for c in one.per_class:
            mine = pooled.get(c.label, ev.ClassMetrics(c.label, 0, 0, 0))
            pooled[c.label] = ev.ClassMetrics(
                c.label,
                mine.examples + c.examples,
                mine.correct + c.correct,
                mine.predicted + c.predicted,
            )
    return ev.ModelMetrics.of(tuple(pooled.values()))


def floor_evidence(
    candidate: ev.ModelMetrics, comparisons: Sequence[ev.Comparison], config: EvaluatorConfig
) -> tuple[ev.ModelMetrics, str]:
    """The images the floor is judged on: the new split, or, where it cannot decide alone
    (decides_floor), the new split and every other set the candidate was scored on,
    pooled by class; and a note saying so.

    Every one of those images is unseen by the candidate: the champion's reference set
    and the earlier spans' eval splits are eval splits, which no model trains on, and the
    earlier spans' images are counted once (the executor leaves out those the reference
    set holds); the golden set is the user's. So pooling them only adds evidence.
    """
    others = [c.name for c in comparisons if c.name != NEW_SPLIT and c.candidate is not None]
    elsewhere = _pooled(
        [c.candidate for c in comparisons if c.name != NEW_SPLIT and c.candidate is not None]
    )
    if not others or decides_floor(candidate, config, elsewhere):
        return candidate, ""
    return _pooled([candidate, elsewhere]), (
        f" on {NEW_SPLIT} and {', '.join(others)} pooled: {NEW_SPLIT}'s "
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
        # On the floor's images: 3 new images of 3 classes are too few to show it.
        ev.Check(
            "predicts_several_classes",
            floor_metrics.predicted_classes > 1,
            f"predicts {floor_metrics.predicted_classes} of {len(floor_metrics.per_class)} classes",
        ),
    ]


def thin_floor(
    floor_metrics: ev.ModelMetrics,
    floor_on: str,
    comparisons: Sequence[ev.Comparison],
    champion: ev.Champion,
    config: EvaluatorConfig,
) -> str:
    """Why a floor the candidate missed was too thin to decide ("" when it was not, or
    was met): the champion, as accurate as it is on the same images, would miss it more
    than paired_significance of the time (on 6 images of 3 classes the floor asks for
    all 6, which a model right 85% of the time scores 38% of the time). No rule can
    decide there: a model guessing among 3 classes gets 4 of 6 right 10% of the time. The
    safe side is taken, and said so: refused, the champion stays. It does not freeze the
    schedule: each refused span's eval split joins the next candidate's evidence (the
    earlier spans' set), and each push grows the reference set, until the floor can be
    judged."""
    if champion.status != ev.COMPARED or floor_metrics.accuracy >= required_accuracy(
        floor_metrics, config
    ):
        return ""
    others = [c for c in comparisons if c.name != NEW_SPLIT and c.candidate is not None]
    if others and not floor_on:
        return ""  # the new split alone could decide it (decides_floor)
    on = [c for c in comparisons if c.champion is not None and (floor_on or c.name == NEW_SPLIT)]
    theirs = _pooled([c.champion for c in on if c.champion is not None])
    if not theirs.examples:
        return ""
    reached = floor_pass_rate(floor_metrics, config, theirs.accuracy)
    if reached >= 1 - config.paired_significance:
        return ""
    return (
        f"; too thin to decide ({floor_metrics.examples} images): champion "
        f"{champion.version}, right on {theirs.accuracy:.0%} of them, would reach this floor "
        f"{reached:.0%} of the time; refused on the safe side, the champion stays, and this "
        "span's eval images join the next candidate's"
    )


def _champion_checks(
    comparison: ev.Comparison,
    config: EvaluatorConfig,
    classes_added: bool = False,
    against: str = CHAMPION,
    share: int = 1,
) -> list[ev.Check]:
    """Candidate against champion (or the record holder) on one set: paired image by
    image when the pairs were recorded, else (an evaluation of version 2) on the two
    accuracies. `share`: how many comparisons share the decision's levels (sharing)."""
    if comparison.paired is not None:
        return _paired_checks(comparison, config, classes_added, against, share)
    assert comparison.candidate is not None and comparison.champion is not None
    return _unpaired_checks(comparison.candidate, comparison.champion, config, comparison.name)


def _judged_classes(comparison: ev.Comparison, config: EvaluatorConfig) -> list[paired.ClassPaired]:
    """The classes of a set compared one by one: those with min_class_examples images."""
    return [c for c in comparison.paired_by_class if c.paired.images >= config.min_class_examples]


def set_levels(
    comparison: ev.Comparison, config: EvaluatorConfig, share: int = 1, classes_added: bool = False
) -> tuple[float, float]:
    """(significance, margin significance) the whole set is judged at: the decision's
    levels divided among the `share` comparisons that could refuse, then halved when the
    set's classes are judged too (the whole set and its classes share the set's part;
    each class gets its half divided by the number of classes judged). With a class added
    the margin rule is off (0)."""
    parts = share * (2 if _judged_classes(comparison, config) else 1)
    margin = 0.0 if classes_added else config.margin_significance
    return config.paired_significance / parts, margin / parts


def _paired_checks(
    comparison: ev.Comparison,
    config: EvaluatorConfig,
    classes_added: bool,
    against: str,
    share: int = 1,
) -> list[ev.Check]:
    """The two rules of paired.py on the set and on each class, at the set's share of the
    decision's levels (set_levels). With a class added, the old classes are refused only
    when significantly worse: a new class takes some of the images between it and its
    neighbours, by design, so the margin would refuse every model that learns one."""
    assert comparison.paired is not None
    on = comparison.name if against == CHAMPION else f"{comparison.name} against {against}"
    significance, margin_significance = set_levels(comparison, config, share, classes_added)
    overall = paired.judge(
        comparison.paired,
        config.tolerance,
        significance,
        margin_significance,
    )
    checks = [
        ev.Check(
            f"not_worse_than_{against.replace(' ', '_')}:{comparison.name}",
            not overall.worse,
            f"on {on} ({comparison.paired.images} images): {overall.detail}",
        )
    ]
    judged = _judged_classes(comparison, config)
    # Each class is one more chance to refuse by luck: the levels are shared (Bonferroni).
    for class_paired in judged:
        verdict = paired.judge(
            class_paired.paired,
            config.class_tolerance,
            significance / len(judged),
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


def with_tests(comparison: ev.Comparison, config: EvaluatorConfig, share: int = 1) -> ev.Comparison:
    """The comparison with its paired test's name, p-value, margin and level (the
    significance the whole set is judged at, set_levels) filled in."""
    if comparison.paired is None:
        return comparison
    return dataclasses.replace(
        comparison,
        test=paired.TEST_NAME,
        p_value=round(comparison.paired.p_worse, 6),
        margin=config.tolerance,
        level=set_levels(comparison, config, share)[0],
    )


def too_small(comparison: ev.Comparison, config: EvaluatorConfig, share: int = 1) -> bool:
    """No outcome on this set's discordant images could have refused the candidate at
    its share of the decision's levels (share 1: at the undivided levels)."""
    if comparison.paired is None:
        return False
    level = max(set_levels(comparison, config, share))
    return comparison.paired.discordant < paired.fewest_discordant(level)


def can_refuse(comparison: ev.Comparison, config: EvaluatorConfig) -> bool:
    """Whether some outcome on this comparison could refuse the candidate: both models
    scored, and enough discordant images to refuse at the undivided levels. Those that
    cannot take no share of the decision's levels."""
    return (
        comparison.compared
        and comparison.candidate is not None
        and comparison.champion is not None
        and not too_small(comparison, config)
    )


def sharing(
    comparisons: Sequence[ev.Comparison],
    record_comparisons: Sequence[ev.Comparison],
    config: EvaluatorConfig,
) -> int:
    """How many comparisons share the decision's levels: every set against the champion
    and, when it is another model, against the record holder, that could refuse
    (can_refuse); at least 1. An equally good candidate is refused when any one of them
    refuses by luck, so each gets 1/m of paired_significance and margin_significance
    (Bonferroni): the decision as a whole refuses it at most paired_significance of the
    time by McNemar's test, however many sets there are."""
    return max(1, sum(can_refuse(c, config) for c in [*comparisons, *record_comparisons]))


def tested(
    comparisons: Sequence[ev.Comparison],
    record_comparisons: Sequence[ev.Comparison],
    config: EvaluatorConfig,
) -> tuple[tuple[ev.Comparison, ...], tuple[ev.Comparison, ...]]:
    """The comparisons with their tests filled in (with_tests), at the levels decide
    judges them at: what the Evaluator records in evaluation.json."""
    share = sharing(comparisons, record_comparisons, config)
    return (
        tuple(with_tests(c, config, share) for c in comparisons),
        tuple(with_tests(c, config, share) for c in record_comparisons),
    )


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
    compared = champion.status == ev.COMPARED
    held_to_record = record is not None and record.status == ev.COMPARED
    share = sharing(
        comparisons if compared else (), record_comparisons if held_to_record else (), config
    )
    floor_metrics, floor_on = floor_evidence(candidate, comparisons, config)
    floor_on += thin_floor(floor_metrics, floor_on, comparisons, champion, config)
    checks = _floor_checks(candidate, config, floor_metrics, floor_on)
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
                checks += _champion_checks(
                    comparison, config, bool(champion.classes_added), share=share
                )
        checks += _new_class_checks(candidate, champion, config)
    if held_to_record:
        assert record is not None
        for comparison in record_comparisons:
            if comparison.compared and comparison.candidate and comparison.champion:
                checks += _champion_checks(
                    comparison, config, bool(record.classes_added), RECORD_HOLDER, share
                )
    failed = [c for c in checks if not c.passed]
    if failed:
        return ev.Decision(False, f"not blessed: {failed[0].detail}", tuple(checks))
    if compared:
        on = [c.name for c in comparisons if c.compared]
        skipped: list[str] = []
        for c in comparisons:  # a set partly read (an earlier span gone) is said so
            name = f"part of {c.name}" if c.name in on else c.name
            if not c.compared and name not in skipped:
                skipped.append(name)
        # The note names damaged pushes passed over to find the champion, and classes
        # added or removed.
        noted = f" ({champion.note})" if champion.note else ""
        against = (
            f"not worse than champion {champion.version}{noted} on {', '.join(on) or 'nothing'}"
        )
        if skipped:
            against += f" ({', '.join(skipped)} skipped)"
        small = [c.name for c in comparisons if c.compared and too_small(c, config, share)]
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
