"""The Evaluator's settings: the rules that bless a model for the Pusher.

A candidate is blessed when it passes the floor and, when a champion is served, is
not worse than the champion on every evaluation set (components/evaluator/blessing.py,
docs/retraining.md):
  floor: accuracy >= accuracy_threshold, and clearly above the majority-class rate of
    the eval split (by majority_margin, and by a one-sided binomial test at
    significance), and it predicts more than one class; judged on every unseen image
    pooled where the eval split alone cannot decide it (blessing.decides_floor);
  champion: on the new eval split, on the champion's reference set (the eval images of
    the last pushes), on the eval splits of the earlier spans the candidate was trained
    on (less the images the reference set holds) and on the golden set if any, each
    restricted to the classes both models know, the two models are compared image by
    image (paired.py, McNemar's exact test): refused when the candidate is significantly
    worse (paired_significance), or worse by more than the practical margin `tolerance`
    at the weaker level margin_significance; the same class by class, for each class
    with at least min_class_examples images, with class_tolerance. Both levels are the
    whole decision's: shared among every set that could refuse, against the champion and
    the record holder, and within a set between the set and its classes
    (blessing.sharing), so an equally good candidate is refused by McNemar's test at
    most paired_significance of the time;
  new classes: each class the champion lacks has a recall of at least
    new_class_min_recall on the new eval split.
"""

from __future__ import annotations

import dataclasses


@dataclasses.dataclass(frozen=True)
class EvaluatorConfig:
    """Everything the Evaluator can be told.

    Attributes:
      accuracy_threshold: the lowest overall eval accuracy (0..1) that blesses a model.
      majority_margin: how far above the majority-class rate of the eval split the
        accuracy must be (always predicting the largest class scores that rate).
      significance: the accuracy must also beat the majority-class rate in a one-sided
        binomial test at this level, so a small eval split cannot bless by luck; 0
        turns the test off.
      tolerance: the practical margin: a drop in accuracy (0..1) on a set whose one-sided
        (1 - margin_significance) confidence bound lies beyond it refuses.
      class_tolerance: the same margin for a class's recall.
      paired_significance: a candidate significantly worse than the champion (exact
        one-sided McNemar test) is refused; this level is shared among the decision's
        sets and classes, so it bounds how often an equally good candidate is refused.
      margin_significance: the level of that bound: a large drop refuses on this much
        evidence (paired.py); shared the same way.
      min_class_examples: classes with fewer eval images are not compared one by one
        (their recall is too noisy); they still count overall.
      compare_with_champion: compare with the newest push in the serving directory;
        false applies the floor alone.
      golden_examples: a curated evaluation set every candidate and champion are also
        scored on: the folder of an ImageExampleGen output or the OUT of `imgpipe
        convert SRC OUT` (label_map.json and Split-*/ shards; every split is used). "" for
        none.
      new_class_min_recall: the recall on the new eval split that a class the champion
        does not know must reach (it has no champion to be compared with).
      reference_per_class: a blessed model's reference set keeps the eval images of the
        last pushes, newest first, at most this many per class.
    """

    accuracy_threshold: float = 0.0
    majority_margin: float = 0.05
    significance: float = 0.01
    tolerance: float = 0.05
    class_tolerance: float = 0.1
    min_class_examples: int = 20
    compare_with_champion: bool = True
    golden_examples: str = ""
    new_class_min_recall: float = 0.5
    paired_significance: float = 0.05
    margin_significance: float = 0.2
    reference_per_class: int = 200

    def validate(self) -> None:
        """Raises ValueError naming the first bad setting."""
        for name in (
            "accuracy_threshold",
            "majority_margin",
            "tolerance",
            "class_tolerance",
            "new_class_min_recall",
        ):
            value = getattr(self, name)
            if not 0.0 <= value <= 1.0:
                raise ValueError(f"{name} must be in [0, 1], got {value}")
        if not 0.0 <= self.significance < 0.5:
            raise ValueError(
                f"significance must be in [0, 0.5) (0 turns the test off), got {self.significance}"
            )
        for name in ("paired_significance", "margin_significance"):
            value = getattr(self, name)
            if not 0.0 <= value < 0.5:
                raise ValueError(f"{name} must be in [0, 0.5), got {value}")
        if self.reference_per_class < 1:
            raise ValueError(
                f"reference_per_class must be at least 1, got {self.reference_per_class}"
            )
        if self.min_class_examples < 1:
            raise ValueError(
                f"min_class_examples must be at least 1, got {self.min_class_examples}"
            )
