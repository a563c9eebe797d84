"""The label audit: which images a trained model believes are filed under the wrong class.

Confident learning (Northcutt et al., 2021), as cleanlab implements it: each class's
threshold is the mean probability the model gives that class on the images filed under
it; the confident joint counts images by (given class, class whose threshold they pass),
and `prune_by_noise_rate` flags, from each off-diagonal cell, the images with the largest
margin between the suggested and the given class. Pure functions over the model's
probabilities; scoring the images is label_audit_scoring.py's, and the gate before training
is ImageStatistics' (components/image_statistics/label_gate.py).

Classes are matched by name: the model's class names (its label map) against the span's.
Images of a class the model does not know are left out and counted.

Example:
  found = audit(model_classes, given, probabilities)
  found.flagged  # indices of likely label errors, least self-confident first
"""

from __future__ import annotations

import dataclasses
from collections.abc import Sequence

import numpy as np

from imgpipe.components.common.formats import image_stats as schema

# The most images an audit scores (StatisticsConfig.label_audit_max_images' default):
# the model's inference is the audit's cost.
DEFAULT_MAX_IMAGES = 2000
# The flagged images listed in image_stats.json and the report; the count is exact.
MAX_LISTED_ISSUES = 200
# Fewer audited images than this, or fewer than two classes, leave the estimate
# (per-class thresholds and noise rates) meaningless: the audit is skipped.
MIN_AUDITED_IMAGES = 10
MIN_CLASSES = 2
# cleanlab's filter: the images in each off-diagonal cell of the confident joint with the
# largest margin p(suggested) - p(given), as many as that cell's estimated count.
FILTER_BY = "prune_by_noise_rate"
# Probabilities below this are clipped before the rows are renormalized over the
# audited classes (a row with all its mass on a class absent from the span).
_MIN_PROBABILITY = 1e-6


@dataclasses.dataclass(frozen=True)
class Found:
    """The audit of a set of scored images.

    Attributes:
      audited: the images audited (of classes the model knows).
      unknown_class: images left out because the model does not know their class.
      flagged: indices into the scored images, least self-confident first.
      suggested: the model's most probable class for each scored image ("" if unknown).
      confidence: that class's probability.
      given_confidence: the probability of the given class (0 if unknown).
      reason: why nothing was audited ("" when it ran).
    """

    audited: int
    unknown_class: int
    flagged: tuple[int, ...]
    suggested: tuple[str, ...]
    confidence: tuple[float, ...]
    given_confidence: tuple[float, ...]
    reason: str = ""

    @property
    def flagged_fraction(self) -> float:
        return len(self.flagged) / self.audited if self.audited else 0.0


def find_label_issues(labels: np.ndarray, probabilities: np.ndarray) -> np.ndarray:
    """cleanlab's confident-learning filter: the indices of likely label errors, least
    self-confident first.

    Args:
      labels: int [N], each in 0..C-1; every class should have an image.
      probabilities: float [N, C], out-of-sample where possible, rows summing to 1.
    """
    from cleanlab.filter import find_label_issues as cleanlab_find

    # n_jobs=1: no worker processes inside a Beam/TFX executor.
    return np.asarray(
        cleanlab_find(
            labels=np.asarray(labels, np.int64),
            pred_probs=np.asarray(probabilities, np.float64),
            filter_by=FILTER_BY,
            return_indices_ranked_by="self_confidence",
            n_jobs=1,
        ),
        np.int64,
    )


def too_few(model_classes: Sequence[str], given: Sequence[str]) -> str:
    """Why the audit cannot run on these labels, before any model scores them; "" when
    it can: fewer than MIN_AUDITED_IMAGES images, or MIN_CLASSES classes, that the model
    knows."""
    known = set(model_classes)
    rows = [name for name in given if name in known]
    present = set(rows)
    if len(rows) < MIN_AUDITED_IMAGES or len(present) < MIN_CLASSES:
        return (
            f"{len(rows)} images of {len(present)} classes the model knows: the audit needs "
            f"at least {MIN_AUDITED_IMAGES} images of {MIN_CLASSES} classes"
        )
    return ""


def audit(model_classes: Sequence[str], given: Sequence[str], probabilities: np.ndarray) -> Found:
    """Flags likely label errors among images scored by a model.

    Args:
      model_classes: the model's class names, in the order of the probabilities' columns.
      given: each image's class name as filed.
      probabilities: float [N, len(model_classes)].
    """
    probabilities = np.asarray(probabilities, np.float64).reshape(len(given), len(model_classes))
    column = {name: c for c, name in enumerate(model_classes)}
    known = np.array([name in column for name in given], bool)
    top = probabilities.argmax(axis=1) if len(given) else np.zeros(0, np.int64)
    suggested = tuple(model_classes[c] if k else "" for c, k in zip(top, known, strict=True))
    confidence = tuple(float(probabilities[i, c]) if known[i] else 0.0 for i, c in enumerate(top))
    given_confidence = tuple(
        float(probabilities[i, column[name]]) if known[i] else 0.0 for i, name in enumerate(given)
    )
    rows = [int(i) for i in np.flatnonzero(known)]
    # Only the classes filed in this data: cleanlab estimates a threshold per class.
    present = sorted({column[given[i]] for i in rows})
    unknown = int(len(given) - len(rows))

    def found(flagged: tuple[int, ...], reason: str = "") -> Found:
        return Found(len(rows), unknown, flagged, suggested, confidence, given_confidence, reason)

    reason = too_few(model_classes, given)
    if reason:
        return found((), reason)
    local = {c: j for j, c in enumerate(present)}
    labels = np.array([local[column[given[i]]] for i in rows], np.int64)
    kept = np.clip(probabilities[np.ix_(rows, present)], _MIN_PROBABILITY, None)
    kept /= kept.sum(axis=1, keepdims=True)
    issues = find_label_issues(labels, kept)
    return found(tuple(rows[int(i)] for i in issues))


def issues(
    found: Found, splits: Sequence[str], paths: Sequence[str], given: Sequence[str]
) -> tuple[schema.LabelIssue, ...]:
    """The flagged images as listed: at most MAX_LISTED_ISSUES, least self-confident first."""
    return tuple(
        schema.LabelIssue(
            split=splits[i],
            path=paths[i],
            given=given[i],
            suggested=found.suggested[i],
            confidence=round(found.confidence[i], 6),
            given_confidence=round(found.given_confidence[i], 6),
        )
        for i in found.flagged[:MAX_LISTED_ISSUES]
    )


def describe(result: schema.LabelAudit) -> str:
    """One line: the flagged fraction and, when gated, the gate and the decision."""
    if not result.checked:
        return f"not checked: {result.reason}"
    model = (
        f"model version {result.model_version}"
        if result.model_version is not None
        else "the trained model"
    )
    line = (
        f"{result.flagged_fraction:.1%} of {result.audited} images flagged ({result.flagged}) "
        f"by {model}"
    )
    if not result.threshold:
        return line + " (not gated)"
    reference = (
        f"its own held-out rate {result.reference_fraction:.1%}"
        if result.reference_fraction is not None
        else "no held-out rate recorded"
    )
    decision = "stop" if result.exceeded else "pass"
    if result.exceeded and result.accepted:
        decision = f"above the gate, accepted ({result.accepted})"
    return f"{line}; gate {result.threshold:.1%} ({reference}): {decision}"
