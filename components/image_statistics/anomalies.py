"""The checks that stop a run before training, and the gate that stops it.

TFX's ExampleValidator only records anomalies. ImageStatistics adds its own checks,
reads ExampleValidator's, and with fail_on_anomalies raises `AnomaliesFoundError`
after its outputs are written, so the run ends before the Trainer. Drift anomalies
(drift.py) pass the same gate under their own switch, fail_on_drift.
"""

from __future__ import annotations

import os
from collections.abc import Sequence

from tensorflow_metadata.proto.v0 import anomalies_pb2

from imgpipe.components.common.formats import artifacts, layout
from imgpipe.components.common.formats.image_stats import Anomaly, ImageStats
from imgpipe.components.common.runtime.printable import printable
from imgpipe.components.common.storage import fileio
from imgpipe.components.image_statistics.config import StatisticsConfig

MAX_LISTED_FILES = 10

LABELS_DIFFER = "labels_differ"
LOW_SUPPORTED_FRACTION = "low_supported_fraction"
LEAKAGE = "leakage"
EMPTY_SPLIT = "empty_split"
EXAMPLE_VALIDATOR = "example_validator"
DRIFT = "drift"  # drift.py's: the data moved away from the served model's
UNUSABLE_IMAGES = "unusable_images"
LABEL_ISSUES = "label_issues"  # label_audit.py's: the champion finds too many labels wrong


class AnomaliesFoundError(RuntimeError):
    """The data has anomalies and fail_on_anomalies is set; the message lists them.

    Attributes:
      anomalies: what stopped the run.
      report: the HTML report that shows them.
      span: the span of the data, when it has one.
    """

    def __init__(
        self,
        anomalies: Sequence[Anomaly],
        output_uri: str,
        message: str,
        span: int | None = None,
    ):
        self.anomalies = tuple(anomalies)
        self.output_uri = output_uri
        self.report = os.path.join(output_uri, layout.REPORT_FILE)
        self.span = span
        super().__init__(message)

    def __reduce__(self):
        return type(self), (self.anomalies, self.output_uri, str(self), self.span)


def _reference_split(splits: list[str]) -> str:
    return layout.TRAIN_SPLIT if layout.TRAIN_SPLIT in splits else splits[0]


def check(stats: ImageStats, config: StatisticsConfig) -> list[Anomaly]:
    """The project's own anomalies in the statistics."""
    found = []
    splits = list(stats.splits)
    for split in splits:
        if stats.splits[split].images == 0:
            found.append(Anomaly(EMPTY_SPLIT, split, f"split {split!r} has no decodable image"))
    reference = _reference_split(splits)
    found += _labels_differ(stats, splits, reference)
    if config.verify_images:
        found += _unusable_images(stats, splits)
    found += _low_supported_fraction(stats, config)
    found += _leakage(stats, splits, reference, config)
    return found


def _labels_differ(stats: ImageStats, splits: list[str], reference: str) -> list[Anomaly]:
    """Each split with images whose labels differ from the reference split's."""
    found = []
    # A class with fewer images than there are splits cannot be in every split;
    # ImageExampleGen warned about it by name, and training and evaluation cope.
    too_small = _classes_smaller_than(stats, len(splits))

    for split in splits:
        if split == reference or not stats.splits[split].images:
            continue
        reference_labels = stats.splits[reference].labels.present - too_small
        split_labels = stats.splits[split].labels.present - too_small
        missing = sorted(reference_labels - split_labels)
        extra = sorted(split_labels - reference_labels)
        if missing or extra:
            found.append(
                Anomaly(
                    LABELS_DIFFER,
                    split,
                    f"split {split!r} has different labels from {reference!r}: "
                    f"missing {missing or 'none'}, not in {reference!r} {extra or 'none'}",
                )
            )
    return found


def _unusable_images(stats: ImageStats, splits: list[str]) -> list[Anomaly]:
    """Each split with corrupt or undecodable images, the first few named."""
    found = []
    for split in splits:
        bad = stats.splits[split].undecodable_files
        if not bad:
            continue
        listed = "; ".join(f"{f.path}: {f.reason}" for f in bad[:MAX_LISTED_FILES])
        more = f"; and {len(bad) - MAX_LISTED_FILES} more" if len(bad) > MAX_LISTED_FILES else ""
        found.append(
            Anomaly(
                UNUSABLE_IMAGES,
                split,
                f"{len(bad)} image(s) of split {split!r} are corrupt or undecodable, "
                f"and the Trainer would read them: {listed}{more}",
            )
        )
    return found


def _low_supported_fraction(stats: ImageStats, config: StatisticsConfig) -> list[Anomaly]:
    """Too few of the images usable."""
    found = []
    source = stats.source
    if source.supported_fraction < config.min_supported_fraction:
        found.append(
            Anomaly(
                LOW_SUPPORTED_FRACTION,
                None,
                f"only {source.supported_fraction:.2%} of the images are usable "
                f"(min_supported_fraction {config.min_supported_fraction:.2%}): "
                f"{source.skipped_by_example_gen} skipped by ImageExampleGen, "
                f"{source.undecodable} undecodable",
            )
        )
    return found


def _leakage(
    stats: ImageStats, splits: list[str], reference: str, config: StatisticsConfig
) -> list[Anomaly]:
    """Each split, other than the reference, with more exact copies of images in
    another split than the threshold allows."""
    found = []
    leakage = stats.leakage
    for split in splits:
        fraction = leakage.fraction_by_split[split]
        if split == reference or fraction <= config.leakage_threshold:
            continue
        files = [f"{f.path} ({f.split})" for g in leakage.examples for f in g.files]
        shown = ", ".join(files[:MAX_LISTED_FILES]) + (
            " ..." if len(files) > MAX_LISTED_FILES else ""
        )
        found.append(
            Anomaly(
                LEAKAGE,
                split,
                f"train/eval leakage: {leakage.images_by_split[split]} images of split "
                f"{split!r} ({fraction:.2%}, threshold {config.leakage_threshold:.2%}) have an "
                f"exact copy in another split: {shown}",
            )
        )
    return found


def _classes_smaller_than(stats: ImageStats, count: int) -> set[str]:
    totals: dict[str, int] = {}
    for split_stats in stats.splits.values():
        for label, images in split_stats.labels.counts.items():
            totals[label] = totals.get(label, 0) + images
    return {label for label, total in totals.items() if total < count}


def validator_anomalies(anomalies_uri: str, split_names: Sequence[str]) -> list[Anomaly]:
    """ExampleValidator's anomalies, one entry per split and feature."""
    found = []
    for split in split_names:
        path = os.path.join(
            artifacts.split_dir(anomalies_uri, split), layout.VALIDATOR_ANOMALIES_FILE
        )
        if not fileio.exists(path):
            continue
        proto = anomalies_pb2.Anomalies()
        with fileio.open_file(path, "rb") as f:
            proto.ParseFromString(f.read())
        for feature, info in sorted(proto.anomaly_info.items()):
            description = info.short_description or info.description
            found.append(
                Anomaly(
                    EXAMPLE_VALIDATOR,
                    split,
                    f"ExampleValidator: feature {feature!r}: {description}",
                )
            )
        if proto.HasField("dataset_anomaly_info"):
            info = proto.dataset_anomaly_info
            found.append(
                Anomaly(
                    EXAMPLE_VALIDATOR,
                    split,
                    f"ExampleValidator: dataset: {info.short_description or info.description}",
                )
            )
    return found


def blocking(
    anomalies: Sequence[Anomaly],
    config: StatisticsConfig,
    drift_accepted: bool = False,
    labels_accepted: bool = False,
) -> list[Anomaly]:
    """The anomalies that stop the run: drift under fail_on_drift unless accepted for
    this span (accept_drift_span), label issues under fail_on_anomalies unless accepted
    for this span (accept_label_issues_span), the others under fail_on_anomalies. Each
    gate is accepted on its own: accepting drift never lets mislabelled data through."""

    def stops(anomaly: Anomaly) -> bool:
        if anomaly.code == DRIFT:
            return config.fail_on_drift and not drift_accepted
        if anomaly.code == LABEL_ISSUES:
            return config.fail_on_anomalies and not labels_accepted
        return config.fail_on_anomalies

    return [a for a in anomalies if stops(a)]


def label_issues_fix(span: int | None) -> str:
    """What to do about label issues above the gate: fix them, or accept this span's."""
    which = str(span) if span is not None else "SPAN"
    return (
        "if this span's labels are right (the served model has not seen data like it), "
        f"accept its label audit for this span only: imgpipe run local --accept-label-issues "
        f"{which} (statistics.accept_label_issues_span: {which}, or the "
        "accept_label_issues_span parameter on Kubeflow)"
    )


def drift_fix(span: int | None, config: StatisticsConfig) -> str:
    """What to do about drift: never turn the gate off; accept this one span."""
    which = str(span) if span is not None else "SPAN"
    other = (
        f" (accept_drift_span is {config.accept_drift_span}, this is span {which})"
        if config.accept_drift_span is not None
        else ""
    )
    return (
        "if the data is wrong, fix it; if it changed on purpose, accept its drift for this "
        f"span only{other}: imgpipe run local --accept-drift {which} (statistics."
        f"accept_drift_span: {which}, or the accept_drift_span parameter on Kubeflow); the "
        "Evaluator still compares the new model with the served one on the data that one "
        "was blessed on"
    )


def switches(anomalies: Sequence[Anomaly]) -> str:
    codes = {a.code for a in anomalies}
    names = (["fail_on_anomalies"] if codes - {DRIFT} else []) + (
        ["fail_on_drift"] if DRIFT in codes else []
    )
    return " and ".join(f"statistics.{name}" for name in names)


def gate_message(
    anomalies: Sequence[Anomaly],
    output_uri: str,
    config: StatisticsConfig,
    span: int | None = None,
    drift_accepted: bool = False,
    labels_accepted: bool = False,
) -> str:
    """The anomalies, one a line, whether the run stops, and where the report is."""
    stopping = blocking(anomalies, config, drift_accepted, labels_accepted)
    if stopping:
        outcome = f"the run stops before training ({switches(stopping)}: true)"
    elif blocking(anomalies, config):
        outcome = f"training goes on (accepted for span {span})"
    else:
        outcome = f"training goes on ({switches(anomalies)}: false)"
    lines = [
        f"ImageStatistics found {len(anomalies)} data anomal"
        f"{'y' if len(anomalies) == 1 else 'ies'}; {outcome}:"
    ]
    lines += [
        f"  - [{a.code}{'/' + a.split if a.split else ''}] {printable(a.message)}"
        for a in anomalies
    ]
    if any(a.code == LEAKAGE for a in anomalies):
        lines.append(
            "Exact copies across splits: in a flat folder, example_gen.output.split_by: "
            "content (the default) keeps every copy in one split; in a pre-split folder, "
            "remove each copy from one of its split folders."
        )
    if drift_accepted and any(a.code == DRIFT for a in anomalies):
        lines.append(f"The drift of span {span} is accepted (statistics.accept_drift_span).")
    if labels_accepted and any(a.code == LABEL_ISSUES for a in anomalies):
        lines.append(
            f"The label audit of span {span} is accepted (statistics.accept_label_issues_span)."
        )
    fixes = []
    # A label-issues line names its own fix; turning the gate off is not one.
    if any(a.code not in (DRIFT, LABEL_ISSUES) for a in anomalies):
        fixes.append(
            "fix the data (the report names each file and split)"
            + (
                ", or raise statistics.leakage_threshold if those copies are intended"
                if any(a.code == LEAKAGE for a in anomalies)
                else ""
            )
        )
    if any(a.code == DRIFT for a in stopping):
        fixes.append(drift_fix(span, config))
    if any(a.code == LABEL_ISSUES for a in stopping):
        fixes.append(label_issues_fix(span))
    lines.append(
        f"Inspect {os.path.join(output_uri, layout.REPORT_FILE)} and "
        f"{layout.IMAGE_STATS_FILE}" + (f", then {'; '.join(fixes)}." if fixes else ".")
    )
    return "\n".join(lines)
