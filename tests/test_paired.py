"""Comparing candidate and champion image by image (components/evaluator/paired.py): the
exact McNemar test, the two refusal rules, sets too small to decide, and the decision on
the situations an unattended schedule meets (more data of the same classes, a class
added, a grey span)."""

from __future__ import annotations

import dataclasses
import math
import random

import pytest

from imgpipe.components.common.formats import reference_sets
from imgpipe.components.evaluator import blessing, paired
from imgpipe.components.evaluator import evaluation as ev
from imgpipe.components.evaluator.config import EvaluatorConfig

pytestmark = pytest.mark.unit

CHAMPION = ev.Champion(ev.COMPARED, "", "/serving/100", 100)


def test_the_exact_tail_is_the_binomial_sum():
    assert paired.binomial_tail(4, 4) == pytest.approx(1 / 16)
    assert paired.binomial_tail(4, 3) == pytest.approx(5 / 16)
    assert paired.binomial_tail(10, 0) == 1.0 and paired.binomial_tail(3, 4) == 0.0
    expected = sum(math.comb(20, i) for i in range(15, 21)) / 2**20
    assert paired.binomial_tail(20, 15) == pytest.approx(expected)
    assert paired.Paired(50, 2, 6).p_worse == pytest.approx(paired.binomial_tail(8, 6))
    assert paired.fewest_discordant(0.2) == 3 and paired.fewest_discordant(0.05) == 5
    assert paired.Paired(24, 0, 3).p_beyond(0.05) == pytest.approx(0.1333, abs=1e-3)
    assert paired.Paired(24, 3, 0).p_beyond(0.05) == 1.0


def test_refused_when_significantly_worse_or_clearly_beyond_the_margin():
    rules = {"margin": 0.05, "significance": 0.05, "margin_significance": 0.2}
    # 0 against 6: p = 1/64, significantly worse, however small the drop.
    assert paired.judge(paired.Paired(500, 0, 6), **rules).worse
    # 1 against 5 on 54 images (p = 0.109; a 7.4% drop whose 80% bound is within the
    # margin), and 0 against 4 (p = 0.0625): not enough to refuse.
    assert not paired.judge(paired.Paired(54, 1, 5), **rules).worse
    assert not paired.judge(paired.Paired(54, 0, 4), **rules).worse
    # 0 against 3 on 24 images: a 12.5% drop, beyond the margin at p = 0.13: refused.
    verdict = paired.judge(paired.Paired(24, 0, 3), **rules)
    assert verdict.worse and "beyond the margin 0.05 at p=0.133" in verdict.detail
    # The same four images on 1,000 are a 0.4% drop, within the margin: kept.
    assert not paired.judge(paired.Paired(1000, 0, 4), **rules).worse
    # Better or tied: never refused.
    assert not paired.judge(paired.Paired(54, 9, 0), **rules).worse
    assert not paired.judge(paired.Paired(54, 3, 3), **rules).worse
    verdict = paired.judge(paired.Paired(54, 0, 2), **rules)
    assert verdict.too_small and not verdict.worse
    assert "too small to decide: 2 discordant images, at least 3 needed" in verdict.detail
    assert "McNemar exact, one-sided p=0.25" in verdict.detail
    # One image on a set of five is no evidence, however large the drop.
    assert not paired.judge(paired.Paired(5, 0, 1), **rules).worse


def comparison(name: str, n_per_class: int, right: dict[str, tuple[int, int, int]]):
    """A set of two classes; per class (both right, candidate alone, champion alone)."""
    by_class = []
    candidate, champion = [], []
    for label, (both, ours, theirs) in right.items():
        by_class.append(paired.ClassPaired(label, paired.Paired(n_per_class, ours, theirs)))
        candidate.append(ev.ClassMetrics(label, n_per_class, both + ours, n_per_class))
        champion.append(ev.ClassMetrics(label, n_per_class, both + theirs, n_per_class))
    total = sum((c.paired for c in by_class), paired.Paired(0, 0, 0))
    return ev.Comparison(
        name,
        f"/{name}",
        True,
        "",
        tuple(right),
        ev.ModelMetrics.of(tuple(candidate)),
        ev.ModelMetrics.of(tuple(champion)),
        total,
        tuple(by_class),
    )


def decide(*comparisons: ev.Comparison, champion=CHAMPION, candidate=None) -> ev.Decision:
    candidate = candidate or comparisons[0].candidate
    config = EvaluatorConfig(significance=0.0)
    tested, _ = blessing.tested(comparisons, (), config)
    return blessing.decide(candidate, champion, config, tested)


def test_more_data_of_the_same_classes_is_pushed_when_no_set_says_it_is_worse():
    # The span 2: better on the new split, one image worse on a 54-image
    # reference set (0.889 vs 0.907): noise, not evidence.
    new_split = comparison(reference_sets.NEW_SPLIT, 27, {"a": (22, 3, 1), "b": (23, 2, 1)})
    reference = comparison(
        reference_sets.CHAMPION_REFERENCE, 27, {"a": (23, 1, 1), "b": (22, 1, 2)}
    )
    decision = decide(new_split, reference)
    assert decision.blessed, decision.reason
    assert "not worse than champion 100 on new_split, champion_reference" in decision.reason


def test_a_grey_span_is_refused_on_the_colour_reference():
    new_split = comparison(reference_sets.NEW_SPLIT, 30, {"a": (10, 15, 0), "b": (12, 14, 1)})
    colour = comparison(reference_sets.CHAMPION_REFERENCE, 30, {"a": (5, 0, 24), "b": (6, 1, 22)})
    decision = decide(new_split, colour)
    assert not decision.blessed
    assert decision.reason.startswith(
        "not blessed: on champion_reference (60 images): 1 right by the candidate alone, "
        "46 by the champion alone: McNemar exact, one-sided p="
    )


def test_one_class_collapsing_refuses_though_the_whole_set_is_fine():
    config_classes = {"a": (40, 10, 0), "b": (30, 0, 10)}
    reference = comparison(reference_sets.CHAMPION_REFERENCE, 50, config_classes)
    decision = decide(reference)
    assert not decision.blessed
    failed = [c.name for c in decision.checks if not c.passed]
    assert failed == ["class_not_worse:champion_reference:b"]


def test_a_set_too_small_to_decide_is_said_to_be():
    small = comparison(reference_sets.GOLDEN, 10, {"a": (9, 0, 1), "b": (9, 1, 0)})
    new_split = comparison(reference_sets.NEW_SPLIT, 40, {"a": (35, 3, 1), "b": (36, 2, 1)})
    decision = decide(new_split, small)
    assert decision.blessed
    assert "(golden too small to decide)" in decision.reason
    tested = blessing.with_tests(small, EvaluatorConfig())
    assert tested.test == paired.TEST_NAME and tested.margin == 0.05
    assert tested.p_value == pytest.approx(0.75)


def test_two_models_of_equal_quality_are_rarely_refused():
    """The false-refusal rate of the rules on two models of equal accuracy with
    independent errors (the worst case: the most discordant images): both 85% right on a
    54-image reference and a 60-image new split, simulated with a fixed seed. It was
    12% while each set was judged at the full levels; benchmarks/equal_models.py
    measures more sizes, agreements and the record holder (test_equal_models_...)."""
    config = EvaluatorConfig(significance=0.0)
    rng = random.Random(7)
    refused, runs = 0, 400

    def draw(name: str, n: int) -> ev.Comparison:
        right = {}
        for label in ("a", "b"):
            outcomes = [(rng.random() < 0.85, rng.random() < 0.85) for _ in range(n // 2)]
            both = sum(ours and theirs for ours, theirs in outcomes)
            ours = sum(ours and not theirs for ours, theirs in outcomes)
            theirs = sum(theirs and not ours for ours, theirs in outcomes)
            right[label] = (both, ours, theirs)
        return comparison(name, n // 2, right)

    for _ in range(runs):
        sets = [draw(reference_sets.NEW_SPLIT, 60), draw(reference_sets.CHAMPION_REFERENCE, 54)]
        tested, _ = blessing.tested(sets, (), config)
        refused += not blessing.decide(sets[0].candidate, CHAMPION, config, tested).blessed
    # The two sets, and each one's classes, share the decision's levels.
    assert refused / runs <= 0.05, refused / runs


def test_with_a_class_added_the_old_classes_must_only_not_be_significantly_worse():
    """A new class takes some images between it and its neighbours: a 12.5% drop on 24
    images refuses a candidate of the same classes, not one that adds a class."""
    added = ev.Champion(ev.COMPARED, "", "/serving/100", 100, classes_added=("c",))
    reference = comparison(reference_sets.CHAMPION_REFERENCE, 12, {"a": (9, 0, 2), "b": (10, 0, 1)})
    candidate = ev.ModelMetrics.of(
        reference.candidate.per_class + (ev.ClassMetrics("c", 12, 10, 12),)
    )
    assert not decide(reference).blessed  # same classes: beyond the margin
    decision = decide(reference, champion=added, candidate=candidate)
    assert decision.blessed, decision.reason
    assert "no margin (a class was added" in next(
        c.detail for c in decision.checks if c.name == "not_worse_than_champion:champion_reference"
    )
    # ...but significantly worse still refuses.
    collapsed = comparison(reference_sets.CHAMPION_REFERENCE, 12, {"a": (4, 0, 7), "b": (5, 0, 6)})
    assert not decide(collapsed, champion=added, candidate=candidate).blessed


@pytest.mark.unit
def test_a_decision_states_the_smallest_drop_it_could_have_seen():
    """At 5% significance and 80% power (z = 1.6449 + 0.8416): 30 images see only a drop
    of 21 points, 3,000 images with 10% of them discordant one of 1.4 points."""
    assert paired.Paired(30, 0, 0).smallest_visible_drop(0.05) == pytest.approx(0.2061, abs=1e-4)
    three_thousand = paired.Paired(3000, 150, 150)
    assert three_thousand.smallest_visible_drop(0.05) == pytest.approx(0.01436, abs=1e-4)
    assert three_thousand.smallest_visible_drop(0.01) > three_thousand.smallest_visible_drop(0.05)
    assert paired.Paired(0, 0, 0).smallest_visible_drop(0.05) is None


def record_holder(version: int = 100) -> ev.Champion:
    return ev.Champion(ev.COMPARED, "", f"/serving/{version}", version)


@pytest.mark.unit
def test_drops_within_the_margin_do_not_add_up_against_the_record_holder():
    """Each push 4 points below the last passes the champion's 5-point margin; the
    second one is 8 points below the record holder, beyond the margin: refused there."""
    config = EvaluatorConfig(tolerance=0.05)
    candidate = comparison("champion_reference", 100, {"a": (80, 6, 10), "b": (80, 6, 10)})
    # 8 points below the record: 16 images the record alone gets right, 0 the candidate.
    below_record = comparison("champion_reference", 100, {"a": (80, 0, 8), "b": (80, 0, 8)})
    metrics = ev.ModelMetrics.of(
        (ev.ClassMetrics("a", 100, 86, 100), ev.ClassMetrics("b", 100, 86, 100))
    )
    champion = dataclasses.replace(record_holder(200), metrics=candidate.champion)
    decision = blessing.decide(metrics, champion, config, [candidate])
    assert decision.blessed, decision.reason
    decision = blessing.decide(
        metrics, champion, config, [candidate], record_holder(100), [below_record]
    )
    assert not decision.blessed
    assert "against record holder" in decision.reason
    failed = [c.name for c in decision.checks if not c.passed]
    assert "not_worse_than_record_holder:champion_reference" in failed


@pytest.mark.unit
def test_the_record_moves_to_a_push_as_good_as_it_or_with_another_class_set():
    even = comparison("champion_reference", 50, {"a": (40, 3, 3), "b": (40, 2, 2)})
    lower = comparison("champion_reference", 50, {"a": (40, 1, 3), "b": (40, 2, 2)})
    champion = record_holder(200)
    assert blessing.becomes_record(champion, record_holder(100), [lower], [even])[0]
    moved, why = blessing.becomes_record(champion, record_holder(100), [even], [lower])
    assert not moved and "below record 100" in why
    # Without a separate record holder the champion is the record.
    assert not blessing.becomes_record(champion, None, [lower], [])[0]
    added = dataclasses.replace(record_holder(100), classes_added=("c",))
    moved, why = blessing.becomes_record(champion, added, [lower], [lower])
    assert moved and "class set moved" in why
    nothing = ev.Champion(ev.NO_CHAMPION, "nothing pushed yet")
    assert blessing.becomes_record(nothing, None, [], [])[0]


@pytest.mark.unit
def test_an_eval_split_too_small_to_decide_the_floor_is_pooled_with_the_other_sets():
    """3 eval images of 3 classes cannot tell a model from guessing: the floor asked
    for all 3 and refused 2 of 3. With the reference set scored too, the floor is judged
    on every unseen image, and says so."""
    config = EvaluatorConfig()
    three = ev.ModelMetrics.of(
        tuple(ev.ClassMetrics(label, 1, int(label != "c"), 1) for label in ("a", "b", "c"))
    )
    assert not blessing.decides_floor(three, config)
    alone = blessing.decide(three, ev.Champion(ev.NO_CHAMPION, "none"), config, [])
    assert not alone.blessed and "vs floor 1.0000" in alone.reason
    reference = ev.Comparison(
        "champion_reference",
        "/ref",
        True,
        "",
        ("a", "b", "c"),
        ev.ModelMetrics.of(tuple(ev.ClassMetrics(c, 20, 17, 20) for c in ("a", "b", "c"))),
    )
    pooled = blessing.decide(three, ev.Champion(ev.NO_CHAMPION, "none"), config, [reference])
    assert pooled.blessed, pooled.reason
    floor = next(c for c in pooled.checks if c.name == "floor")
    assert floor.detail.startswith("accuracy 0.8413 vs floor")
    assert "new_split and champion_reference pooled" in floor.detail


def test_the_sets_and_the_record_holder_share_the_decisions_levels():
    """0 against 5 on 500 images (p = 1/32) refuses when it is the only set that could
    refuse; beside another that could (against the champion or the record holder), each
    is judged at half the level and it does not. A set too small to refuse anything
    takes no share. The level each set was judged at is recorded."""
    config = EvaluatorConfig(significance=0.0, min_class_examples=1000)
    worse = comparison("champion_reference", 250, {"a": (200, 0, 3), "b": (200, 0, 2)})
    even = comparison("golden", 250, {"a": (200, 1, 1), "b": (200, 1, 1)})
    tiny = comparison("golden", 250, {"a": (200, 1, 0), "b": (200, 0, 1)})
    candidate = worse.candidate

    def decided(comparisons, record_comparisons=()):
        tested, tested_record = blessing.tested(comparisons, record_comparisons, config)
        record = record_holder(50) if record_comparisons else None
        made = blessing.decide(candidate, CHAMPION, config, tested, record, tested_record)
        return made, tested

    alone, tested = decided([worse])
    assert not alone.blessed and tested[0].level == pytest.approx(0.05)
    assert "(refuses at 0.05)" in alone.reason
    shared, tested = decided([worse, even])
    assert shared.blessed, shared.reason
    assert [c.level for c in tested] == [pytest.approx(0.025)] * 2
    detail = next(c.detail for c in shared.checks if c.name.endswith(":champion_reference"))
    assert "(refuses at 0.025)" in detail
    assert decided([worse], [even])[0].blessed  # the record holder's set shares them too
    assert blessing.sharing([worse, tiny], (), config) == 1
    assert not decided([worse, tiny])[0].blessed


def test_a_new_split_too_thin_for_its_floor_is_judged_with_every_unseen_image():
    """7 images of 5 classes: the floor asks for 6, which a model right 85% of the time
    misses 28% of the time. With the reference set's images the floor is judged on all
    of them; a split that can decide still refuses alone (a grey span's 16 images)."""
    config = EvaluatorConfig()
    seven = ev.ModelMetrics.of(
        tuple(
            ev.ClassMetrics(label, n, right, n)
            for label, n, right in (("a", 2, 2), ("b", 2, 1), ("c", 1, 1), ("d", 1, 0), ("e", 1, 1))
        )
    )
    reference = ev.Comparison(
        "champion_reference",
        "/ref",
        True,
        "",
        ("a", "b", "c", "d", "e"),
        ev.ModelMetrics.of(tuple(ev.ClassMetrics(c, 20, 17, 20) for c in "abcde")),
    )
    none = ev.Champion(ev.NO_CHAMPION, "none")
    assert blessing.floor_pass_rate(seven, config, 0.85) == pytest.approx(0.7166, abs=1e-3)
    assert not blessing.decide(seven, none, config, []).blessed
    pooled = blessing.decide(seven, none, config, [reference])
    assert pooled.blessed, pooled.reason
    assert "new_split and champion_reference pooled" in pooled.reason
    # Grey photos: 4 of 16 right, where the floor (9 of 16) decides.
    grey = ev.ModelMetrics.of(tuple(ev.ClassMetrics(c, 4, 1, 4) for c in "abcd"))
    colour = dataclasses.replace(
        reference,
        candidate=ev.ModelMetrics.of(tuple(ev.ClassMetrics(c, 20, 17, 20) for c in "abcd")),
    )
    refused = blessing.decide(grey, none, config, [colour])
    assert not refused.blessed and "accuracy 0.2500 vs floor 0.5625" in refused.reason
    assert "pooled" not in refused.reason


def test_a_floor_too_thin_to_decide_says_so_and_keeps_the_champion():
    """3 new images and 3 reference images of 3 classes: the floor asks for all 6, which
    the champion itself (5 of 6 here) reaches a third of the time. The refusal says the
    evidence was too thin, and why."""
    new_split = comparison(
        reference_sets.NEW_SPLIT, 1, {"a": (1, 0, 0), "b": (1, 0, 0), "c": (0, 0, 0)}
    )
    reference = comparison(
        reference_sets.CHAMPION_REFERENCE, 1, {"a": (1, 0, 0), "b": (1, 0, 0), "c": (1, 0, 0)}
    )
    config = EvaluatorConfig()
    tested, _ = blessing.tested([new_split, reference], (), config)
    champion = dataclasses.replace(CHAMPION, metrics=new_split.champion)
    decision = blessing.decide(new_split.candidate, champion, config, tested)
    assert not decision.blessed
    assert (
        "too thin to decide (6 images): champion 100, right on 83% of them, would reach "
        "this floor 33% of the time; refused on the safe side"
    ) in decision.reason
    # Without a champion there is nothing to weigh the floor by: refused, as before.
    alone = blessing.decide(new_split.candidate, ev.Champion(ev.NO_CHAMPION, ""), config, tested)
    assert not alone.blessed and "too thin" not in alone.reason
