"""Accepted drift that stays accepted until a model trained on it is served.

`--accept-drift N` accepts span N's drift against the champion. The change it accepts
(a class added, a channel moved) is still there in span N+1 until a model trained on it
is pushed, so the acceptance is recorded beside the champion it was measured against:

  <serving_dir>/.accepted-drift/<champion version>-span-<N>.json
  (the record's format: components/common/formats/acceptances.py)

A later span whose drift against the *same* champion is the same change (each drifted
metric on the same subject, at most one threshold further than the accepted distance;
each class added or removed among those accepted) passes the gate as accepted at span
N. A different change, or any change once another model has been pushed (a new
champion version), stops the run again.
"""

from __future__ import annotations

from collections.abc import Sequence

from imgpipe.components.common.formats import image_stats
from imgpipe.components.common.formats.acceptances import Acceptance


def covers(acceptance: Acceptance, drift: image_stats.Drift) -> bool:
    """Whether every change in `drift` is one `acceptance` accepted."""
    if not set(drift.classes_added) <= set(acceptance.classes_added):
        return False
    if not set(drift.classes_removed) <= set(acceptance.classes_removed):
        return False
    accepted = {(c.metric, c.subject): c for c in acceptance.checks}
    for check in drift.checks:
        if not check.drifted:
            continue
        before = accepted.get((check.metric, check.subject))
        if before is None or check.distance > before.distance + check.threshold:
            return False
    return True


def still_accepted(recorded: Sequence[Acceptance], drift: image_stats.Drift) -> Acceptance | None:
    """Of the acceptances recorded against the champion (the run resolved them at its
    head), the newest that covers `drift`, if any."""
    for acceptance in recorded:
        if covers(acceptance, drift):
            return acceptance
    return None
