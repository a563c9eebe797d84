"""Gates accepted one at a time, and accepted drift that stays accepted until a model
trained on it is served (components/image_statistics/acceptances.py, anomalies.py)."""

from __future__ import annotations

import os

import pytest

from imgpipe.components.common.formats import acceptances as records
from imgpipe.components.common.formats import image_stats as schema
from imgpipe.components.image_statistics import acceptances
from imgpipe.components.image_statistics import anomalies as anomaly_lib
from imgpipe.components.image_statistics.config import StatisticsConfig

pytestmark = pytest.mark.unit


def drift(*checks: tuple[str, str, float], added: tuple[str, ...] = ()) -> schema.Drift:
    return schema.Drift(
        checked=True,
        reason="",
        checks=tuple(
            schema.DriftCheck(metric, subject, 0.0, 0.0, distance, 0.1, distance > 0.1)
            for metric, subject, distance in checks
        ),
        classes_added=added,
    )


def test_an_accepted_change_passes_later_spans_until_another_champion_is_served(tmp_path):
    serving = str(tmp_path / "serving")
    # Span 3 adds a class and moves the green channel, accepted against champion 100.
    accepted = drift(("drift_mean_distance", "channel green", 0.3), added=("owl",))
    path = records.record(serving, 100, 3, accepted)
    assert os.path.basename(os.path.dirname(path)) == ".accepted-drift"
    # Span 6: the same class, the channel within one threshold of where it was.
    same = drift(("drift_mean_distance", "channel green", 0.35), added=("owl",))
    assert acceptances.still_accepted(records.recorded(serving, 100), same).span == 3
    # Less of the same change is the same change.
    assert (
        acceptances.still_accepted(records.recorded(serving, 100), drift(added=("owl",)))
        is not None
    )
    # A different change stops again: another class, another channel, or much further.
    assert (
        acceptances.still_accepted(records.recorded(serving, 100), drift(added=("eagle",))) is None
    )
    red = drift(("drift_mean_distance", "channel red", 0.3))
    assert acceptances.still_accepted(records.recorded(serving, 100), red) is None
    far = drift(("drift_mean_distance", "channel green", 0.6), added=("owl",))
    assert acceptances.still_accepted(records.recorded(serving, 100), far) is None
    # Once a model trained on it is served (a new champion), nothing is accepted.
    assert acceptances.still_accepted(records.recorded(serving, 200), same) is None
    # An unreadable record accepts nothing.
    with open(path, "w") as f:
        f.write("{")
    assert acceptances.still_accepted(records.recorded(serving, 100), same) is None


def test_accepting_drift_never_lets_label_issues_through():
    config = StatisticsConfig()
    found = [
        schema.Anomaly(anomaly_lib.DRIFT, None, "the green channel moved"),
        schema.Anomaly(anomaly_lib.LABEL_ISSUES, None, "157 of 600 images look mislabelled"),
    ]
    stopping = anomaly_lib.blocking(found, config, drift_accepted=True)
    assert [a.code for a in stopping] == [anomaly_lib.LABEL_ISSUES]
    message = anomaly_lib.gate_message(
        found, "/out", config, span=4, drift_accepted=True, labels_accepted=False
    )
    assert "the run stops before training" in message
    assert "--accept-label-issues 4" in message and "--accept-drift" not in message
    assert "The drift of span 4 is accepted" in message
    # Each accepted on its own: the run goes on, and says it is accepted, not "stop".
    assert anomaly_lib.blocking(found, config, True, True) == []
    message = anomaly_lib.gate_message(found, "/out", config, 4, True, True)
    assert "training goes on (accepted for span 4)" in message
    # Label issues alone advise their own acceptance, drift alone its own.
    alone = anomaly_lib.gate_message(found[1:], "/out", config, span=5)
    assert "--accept-label-issues 5" in alone and "--accept-drift" not in alone
    assert "--accept-drift 5" in anomaly_lib.gate_message(found[:1], "/out", config, span=5)


def test_an_accepted_label_audit_is_described_as_accepted_not_stop():
    from imgpipe.components.common.images import label_audit

    audit = schema.LabelAudit(
        checked=True,
        reason="",
        audited=100,
        flagged=30,
        flagged_fraction=0.3,
        threshold=0.1,
        exceeded=True,
        accepted="span 4, by accept_label_issues_span",
    )
    line = label_audit.describe(audit)
    assert not line.endswith("stop") and "accepted (span 4" in line
