"""The label audit's confident-learning wrapper and gate, on synthetic probabilities."""

from __future__ import annotations

import dataclasses
import json

import numpy as np
import pytest

from imgpipe.components.common.formats import image_stats as schema
from imgpipe.components.common.images import label_audit
from imgpipe.components.image_statistics import label_gate
from imgpipe.components.image_statistics.anomalies import LABEL_ISSUES, gate_message
from imgpipe.components.image_statistics.config import StatisticsConfig
from tests.test_image_statistics_drift import typed_stats

CLASSES = ("cat", "dog", "fox")


def model_outputs(true: list[int], seed: int = 0, confidence=(0.75, 0.95)) -> np.ndarray:
    """A good model's probabilities: most mass on the true class, the rest spread."""
    rng = np.random.default_rng(seed)
    probabilities = rng.uniform(0.0, 1.0, (len(true), len(CLASSES)))
    probabilities /= probabilities.sum(axis=1, keepdims=True)
    top = rng.uniform(*confidence, len(true))
    probabilities *= (1 - top)[:, None]
    probabilities[np.arange(len(true)), true] += top
    return probabilities


def flipped(true: list[int], fraction: float, seed: int = 1) -> tuple[list[int], set[int]]:
    """Labels with `fraction` of them moved to another class, and which were moved."""
    rng = np.random.default_rng(seed)
    moved = set(rng.choice(len(true), int(fraction * len(true)), replace=False).tolist())
    given = [
        (t + int(rng.integers(1, len(CLASSES)))) % len(CLASSES) if i in moved else t
        for i, t in enumerate(true)
    ]
    return given, moved


TRUE = [i % 3 for i in range(300)]


@pytest.mark.unit
def test_clean_labels_from_a_confident_model_flag_nothing():
    found = label_audit.audit(CLASSES, [CLASSES[t] for t in TRUE], model_outputs(TRUE))
    assert (found.audited, found.unknown_class, found.flagged, found.reason) == (300, 0, (), "")


@pytest.mark.unit
@pytest.mark.parametrize("fraction", [0.05, 0.2, 0.4])
def test_moved_labels_are_found_and_nothing_else(fraction):
    given, moved = flipped(TRUE, fraction)
    found = label_audit.audit(CLASSES, [CLASSES[g] for g in given], model_outputs(TRUE))
    # Precision 1; confident learning's per-cell counts are estimates, so recall >= 90%.
    assert set(found.flagged) <= moved
    assert len(found.flagged) >= 0.9 * len(moved)
    # Ranked least self-confident first; each suggestion is the true class.
    confidences = [found.given_confidence[i] for i in found.flagged]
    assert confidences == sorted(confidences)
    assert all(found.suggested[i] == CLASSES[TRUE[i]] for i in found.flagged)


@pytest.mark.unit
def test_classes_are_matched_by_name_and_unknown_ones_left_out():
    given, moved = flipped(TRUE, 0.2)
    # The model's columns in another order than the span's names, and an "owl" the
    # model never saw: its images are counted, not audited.
    order = ("fox", "cat", "dog")
    probabilities = model_outputs(TRUE)[:, [CLASSES.index(name) for name in order]]
    names = [CLASSES[g] for g in given]
    names[:10] = ["owl"] * 10
    found = label_audit.audit(order, names, probabilities)
    assert (found.audited, found.unknown_class) == (290, 10)
    assert set(found.flagged) <= moved - set(range(10))
    assert len(found.flagged) >= 0.9 * len(moved - set(range(10)))
    assert all(found.suggested[i] == "" for i in range(10))


@pytest.mark.unit
def test_a_class_the_span_lacks_is_left_out_of_the_estimate():
    # The model knows four classes; the span has three of them.
    probabilities = np.concatenate([model_outputs(TRUE), np.full((300, 1), 1e-3)], axis=1)
    probabilities /= probabilities.sum(axis=1, keepdims=True)
    given, moved = flipped(TRUE, 0.2)
    found = label_audit.audit((*CLASSES, "owl"), [CLASSES[g] for g in given], probabilities)
    assert set(found.flagged) <= moved and len(found.flagged) >= 0.9 * len(moved)


@pytest.mark.unit
def test_too_little_to_audit_says_why():
    found = label_audit.audit(CLASSES, ["cat"] * 20, model_outputs([0] * 20))
    assert found.flagged == () and "at least 10 images of 2 classes" in found.reason
    found = label_audit.audit(CLASSES, ["cat", "dog"], model_outputs([0, 1]))
    assert found.audited == 2 and found.reason


@pytest.mark.unit
def test_the_gate_is_relative_to_the_champions_own_rate():
    config = StatisticsConfig(max_label_issue_fraction=0.1, label_issue_reference_factor=3.0)
    assert label_gate.gate_threshold(None, config) == 0.1
    assert label_gate.gate_threshold(0.02, config) == 0.1
    assert label_gate.gate_threshold(0.05, config) == pytest.approx(0.15)
    with pytest.raises(ValueError, match="max_label_issue_fraction"):
        StatisticsConfig(max_label_issue_fraction=0.0).validate()
    with pytest.raises(ValueError, match="label_issue_reference_factor"):
        StatisticsConfig(label_issue_reference_factor=0.5).validate()


def audited(flagged: int, threshold: float, reference: float | None) -> schema.LabelAudit:
    return schema.LabelAudit(
        checked=True,
        model="/serving/7",
        model_version=7,
        images=100,
        audited=100,
        flagged=flagged,
        flagged_fraction=flagged / 100,
        reference_fraction=reference,
        threshold=threshold,
        exceeded=flagged / 100 > threshold,
    )


@pytest.mark.unit
def test_a_span_above_the_gate_is_one_anomaly_line_with_its_fix():
    config = StatisticsConfig()
    assert label_gate.anomalies(audited(10, 0.15, 0.05), "report.html", config) == []
    assert label_gate.anomalies(None, "report.html", config) == []
    (anomaly,) = label_gate.anomalies(audited(40, 0.15, 0.05), "report.html", config)
    assert anomaly.code == LABEL_ISSUES and "\n" not in anomaly.message
    assert "40 of 100 images (40.0%)" in anomaly.message
    assert "above the gate 15.0%" in anomaly.message and "own 5.0%" in anomaly.message
    assert "fix the labels of the images listed in report.html" in anomaly.message
    # The fix for labels that are right is this span's own acceptance (retraining.md).
    message = gate_message([anomaly], "/out", config, span=4)
    assert "imgpipe run local --accept-label-issues 4" in message
    # The gate is not to be turned off: no fail_on_anomalies: false advice.
    assert "fail_on_anomalies: false" not in message
    assert "stop" in label_audit.describe(audited(40, 0.15, 0.05))
    assert label_audit.describe(audited(10, 0.15, None)).endswith(
        "gate 15.0% (no held-out rate recorded): pass"
    )


@pytest.mark.unit
def test_the_audit_round_trips_through_image_stats_json_and_old_files_read():
    issue = schema.LabelIssue("train", "a/1.jpg", "cat", "dog", 0.9, 0.05)
    stats = dataclasses.replace(
        typed_stats(3), label_audit=dataclasses.replace(audited(40, 0.15, 0.05), issues=(issue,))
    )
    text = schema.to_json_text(stats)
    assert json.loads(text)["version"] == 3
    assert schema.from_json_text(text) == stats
    # A version 2 file (an older champion's) reads, without an audit.
    document = json.loads(text)
    document["version"] = 2
    del document["label_audit"]
    assert schema.from_json_text(json.dumps(document)).label_audit is None


@pytest.mark.unit
def test_a_class_with_a_single_image_is_audited_without_error():
    given, _ = flipped(TRUE, 0.2)
    names = [CLASSES[g] for g in given]
    names[0] = "fox"  # and no other "fox" below: keep one
    names = [n if n != "fox" or i == 0 else "cat" for i, n in enumerate(names)]
    found = label_audit.audit(CLASSES, names, model_outputs(TRUE))
    assert found.reason == "" and found.audited == 300
