"""The label audit before training: the champion scores the span, and a span with far more
likely label errors than the champion's own data stops the run.

The audit itself (confident learning, cleanlab) is components/common/images/label_audit.py, the
scoring components/common/images/label_audit_scoring.py; this module finds the champion, sets
the gate and words the anomaly. The gate is relative: a span stops when its flagged
fraction is above max(statistics.max_label_issue_fraction,
statistics.label_issue_reference_factor x the champion's own rate), the champion's own
rate being the same audit on its held-out eval split, recorded in its push by the
Trainer. A push without that record is gated by the floor alone.

Example:
  audited = before_training(resolved_champion, examples_uri, splits, config)
  found = anomalies(audited.result, "report.html (Label audit)", config)
"""

from __future__ import annotations

import dataclasses
from collections.abc import Sequence

from imgpipe.components.common.formats import champion as champion_lib
from imgpipe.components.common.formats import image_stats as schema
from imgpipe.components.common.images import label_audit_scoring as scoring
from imgpipe.components.image_statistics.anomalies import LABEL_ISSUES
from imgpipe.components.image_statistics.config import StatisticsConfig


def gate_threshold(reference_fraction: float | None, config: StatisticsConfig) -> float:
    """The largest flagged fraction a span may have: the floor, or a multiple of the
    champion's own rate on its held-out data when that is higher."""
    if reference_fraction is None:
        return config.max_label_issue_fraction
    return max(
        config.max_label_issue_fraction, config.label_issue_reference_factor * reference_fraction
    )


def before_training(
    resolved: champion_lib.Resolved,
    examples_uri: str,
    splits: Sequence[str],
    config: StatisticsConfig,
) -> scoring.Audited | None:
    """The resolved champion's audit of a span, gated; None when statistics.label_audit
    is off."""
    if not config.label_audit:
        return None
    champion = resolved.model
    if resolved.status == champion_lib.NOT_SET:
        return scoring.skipped("no serving_dir is set, so there is no served model to audit with")
    if champion is None:
        return scoring.skipped(f"{resolved.reason}: nothing to audit with")
    audited = scoring.run(
        champion.path,
        champion.labels,
        examples_uri,
        splits,
        config.label_audit_max_images,
        champion.version,
    )
    if not audited.result.checked:
        return audited
    reference = scoring.read_reference(champion)
    reference_fraction = reference.flagged_fraction if reference else None
    threshold = gate_threshold(reference_fraction, config)
    weak = weak_judge(reference, config)
    result = dataclasses.replace(
        audited.result,
        reason="; ".join(filter(None, [audited.result.reason, weak])),
        reference_fraction=reference_fraction,
        threshold=threshold,
        exceeded=not weak and audited.result.flagged_fraction > threshold,
    )
    return scoring.Audited(result, audited.thumbnails)


def weak_judge(reference: scoring.Reference | None, config: StatisticsConfig) -> str:
    """Why the champion is too weak a judge to gate on ("" when it is not, or when its
    push records no agreement)."""
    if reference is None or reference.agreement is None:
        return ""
    if reference.agreement >= config.label_audit_min_judge_accuracy:
        return ""
    return (
        f"not gated: the champion agreed with {reference.agreement:.1%} of its own held-out "
        f"labels ({reference.audited} images), below statistics."
        f"label_audit_min_judge_accuracy {config.label_audit_min_judge_accuracy:.0%}: a judge "
        "that weak flags what it does not know, not what is mislabelled"
    )


def anomalies(
    result: schema.LabelAudit | None, report: str, config: StatisticsConfig
) -> list[schema.Anomaly]:
    """A label-issues anomaly, one line with its reason and its fix, when the gate is
    exceeded."""
    if result is None or not result.checked or not result.exceeded:
        return []
    gate = f"statistics.max_label_issue_fraction {config.max_label_issue_fraction:g}"
    if result.reference_fraction is not None:
        gate = (
            f"the larger of {gate} and {config.label_issue_reference_factor:g} x the served "
            f"model's own {result.reference_fraction:.1%}"
        )
    return [
        schema.Anomaly(
            LABEL_ISSUES,
            None,
            f"{result.flagged} of {result.audited} images ({result.flagged_fraction:.1%}) look "
            f"mislabelled to the served model (version {result.model_version}), above the gate "
            f"{result.threshold:.1%} ({gate}): fix the labels of the images listed in {report}",
        )
    ]
