"""The blessing decision: pure functions of the two models' metrics and the config.

No TensorFlow: the executor measures, this decides, and the tests check every rule on
hand-made metrics.
"""

from __future__ import annotations

import math

from imgpipe.components.evaluator import evaluation as ev
from imgpipe.components.evaluator.config import EvaluatorConfig


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
    log_p, log_q = math.log(p), math.log1p(-p)

    def log_pmf(k: int) -> float:
        return (
            math.lgamma(n + 1)
            - math.lgamma(k + 1)
            - math.lgamma(n - k + 1)
            + k * log_p
            + (n - k) * log_q
        )

    tail = 0.0
    for k in range(n, -1, -1):
        tail += math.exp(log_pmf(k))
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


def _floor_checks(metrics: ev.ModelMetrics, config: EvaluatorConfig) -> list[ev.Check]:
    label, rate = majority(metrics)
    floor = required_accuracy(metrics, config)
    present = sum(1 for c in metrics.per_class if c.examples)
    return [
        ev.Check(
            "eval_examples",
            metrics.examples > 0 and present > 1,
            f"the eval split has {metrics.examples} images in {present} classes"
            + ("" if present > 1 else "; blessing needs at least 2 classes to tell apart"),
        ),
        ev.Check(
            "floor",
            metrics.accuracy >= floor,
            f"accuracy {metrics.accuracy:.4f} vs floor {floor:.4f} (threshold "
            f"{config.accuracy_threshold:.4f}; always answering {label!r} scores "
            f"{rate:.4f}, plus margin {config.majority_margin:.4f}; significance "
            f"{config.significance})",
        ),
        ev.Check(
            "predicts_several_classes",
            metrics.predicted_classes > 1,
            f"predicts {metrics.predicted_classes} of {len(metrics.per_class)} classes",
        ),
    ]


def _champion_checks(
    candidate: ev.ModelMetrics, champion: ev.ModelMetrics, config: EvaluatorConfig
) -> list[ev.Check]:
    checks = [
        ev.Check(
            "not_worse_than_champion",
            candidate.accuracy >= champion.accuracy - config.tolerance,
            f"accuracy {candidate.accuracy:.4f} vs champion {champion.accuracy:.4f} "
            f"(tolerance {config.tolerance:.4f})",
        )
    ]
    theirs = champion.by_label()
    for ours in candidate.per_class:
        if ours.examples < config.min_class_examples or ours.label not in theirs:
            continue
        mine, other = ours.recall or 0.0, theirs[ours.label].recall or 0.0
        checks.append(
            ev.Check(
                f"class_not_worse:{ours.label}",
                mine >= other - config.class_tolerance,
                f"class {ours.label!r} ({ours.examples} images): recall {mine:.4f} vs "
                f"champion {other:.4f} (tolerance {config.class_tolerance:.4f})",
            )
        )
    return checks


def decide(
    candidate: ev.ModelMetrics, champion: ev.Champion, config: EvaluatorConfig
) -> ev.Decision:
    """Blessed when every check passes; the reason names the first that failed."""
    checks = _floor_checks(candidate, config)
    if champion.status == ev.COMPARED and champion.metrics is not None:
        checks += _champion_checks(candidate, champion.metrics, config)
    failed = [c for c in checks if not c.passed]
    if failed:
        return ev.Decision(False, f"not blessed: {failed[0].detail}", tuple(checks))
    against = (
        f"not worse than champion {champion.version}"
        + (f" ({champion.note})" if champion.note else "")
        if champion.status == ev.COMPARED
        else f"floor alone: {champion.note}"
    )
    floor = next(c for c in checks if c.name == "floor")
    return ev.Decision(True, f"blessed: {floor.detail}; {against}", tuple(checks))
