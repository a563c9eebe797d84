"""The checks that stop a run before training, and the gate that stops it.

TFX's ExampleValidator only records anomalies. ImageStatistics adds its own checks,
reads ExampleValidator's, and with fail_on_anomalies raises `AnomaliesFoundError`
after its outputs are written, so the run ends before the Trainer.
"""

from __future__ import annotations

import dataclasses
import os
from typing import Any

import tensorflow as tf
from tensorflow_metadata.proto.v0 import anomalies_pb2

from components.common import artifacts
from components.image_statistics.compute import TRAIN_SPLIT

# ExampleValidator's output file in each Split-<name>/ folder
# (tfx.components.example_validator.executor.DEFAULT_FILE_NAME).
VALIDATOR_ANOMALIES_FILE = "SchemaDiff.pb"
MAX_LISTED_FILES = 10

LABELS_DIFFER = "labels_differ"
LOW_SUPPORTED_FRACTION = "low_supported_fraction"
LEAKAGE = "leakage"
EMPTY_SPLIT = "empty_split"
EXAMPLE_VALIDATOR = "example_validator"


@dataclasses.dataclass(frozen=True)
class Thresholds:
    leakage: float = 0.0
    min_supported_fraction: float = 0.99

    def validate(self) -> None:
        if not 0.0 <= self.leakage < 1.0:
            raise ValueError(f"leakage_threshold must be in [0, 1), got {self.leakage}")
        if not 0.0 <= self.min_supported_fraction <= 1.0:
            raise ValueError("min_supported_fraction must be in [0, 1], "
                             f"got {self.min_supported_fraction}")


class AnomaliesFoundError(RuntimeError):
    """The data has anomalies and fail_on_anomalies is set; the message lists them."""


def _anomaly(code: str, split: str | None, message: str) -> dict[str, Any]:
    return {"code": code, "split": split, "message": message}


def _reference_split(splits: list[str]) -> str:
    return TRAIN_SPLIT if TRAIN_SPLIT in splits else splits[0]


def check(stats: dict[str, Any], thresholds: Thresholds) -> list[dict[str, Any]]:
    """The project's own anomalies in an image_stats.json document."""
    found = []
    splits = list(stats["splits"])
    for split in splits:
        if stats["splits"][split]["images"] == 0:
            found.append(_anomaly(EMPTY_SPLIT, split, f"split {split!r} has no decodable image"))
    reference = _reference_split(splits)

    def present(split: str) -> set[str]:
        counts = stats["splits"][split]["labels"]["counts"]
        return {name for name, n in counts.items() if n}

    for split in splits:
        if split == reference or not stats["splits"][split]["images"]:
            continue
        missing = sorted(present(reference) - present(split))
        extra = sorted(present(split) - present(reference))
        if missing or extra:
            found.append(_anomaly(
                LABELS_DIFFER, split,
                f"split {split!r} has different labels from {reference!r}: "
                f"missing {missing or 'none'}, not in {reference!r} {extra or 'none'}"))

    source = stats["source"]
    if source["supported_fraction"] < thresholds.min_supported_fraction:
        found.append(_anomaly(
            LOW_SUPPORTED_FRACTION, None,
            f"only {source['supported_fraction']:.2%} of the images are usable "
            f"(min_supported_fraction {thresholds.min_supported_fraction:.2%}): "
            f"{source['skipped_by_example_gen']} skipped by ImageExampleGen, "
            f"{source['undecodable']} undecodable"))

    leakage = stats["leakage"]
    for split in splits:
        fraction = leakage["fraction_by_split"][split]
        if split == reference or fraction <= thresholds.leakage:
            continue
        files = [f"{f['path']} ({f['split']})" for g in leakage["examples"] for f in g["files"]]
        shown = ", ".join(files[:MAX_LISTED_FILES]) + (" ..." if len(files) > MAX_LISTED_FILES
                                                      else "")
        found.append(_anomaly(
            LEAKAGE, split,
            f"train/eval leakage: {leakage['images_by_split'][split]} images of split "
            f"{split!r} ({fraction:.2%}, threshold {thresholds.leakage:.2%}) have an exact "
            f"copy in another split: {shown}"))
    return found


def validator_anomalies(anomalies_uri: str, split_names: list[str]) -> list[dict[str, Any]]:
    """ExampleValidator's anomalies, one entry per split and feature."""
    found = []
    for split in split_names:
        path = os.path.join(artifacts.split_dir(anomalies_uri, split), VALIDATOR_ANOMALIES_FILE)
        if not tf.io.gfile.exists(path):
            continue
        proto = anomalies_pb2.Anomalies()
        with tf.io.gfile.GFile(path, "rb") as f:
            proto.ParseFromString(f.read())
        for feature, info in sorted(proto.anomaly_info.items()):
            description = info.short_description or info.description
            found.append(_anomaly(EXAMPLE_VALIDATOR, split,
                                  f"ExampleValidator: feature {feature!r}: {description}"))
        if proto.HasField("dataset_anomaly_info"):
            info = proto.dataset_anomaly_info
            found.append(_anomaly(EXAMPLE_VALIDATOR, split,
                                  f"ExampleValidator: dataset: "
                                  f"{info.short_description or info.description}"))
    return found


def gate_message(anomalies: list[dict[str, Any]], output_uri: str, failing: bool = True) -> str:
    """The anomalies, one a line, and where the report is."""
    outcome = ("the run stops before training (fail_on_anomalies=True)" if failing
               else "training goes on (fail_on_anomalies=False)")
    lines = [f"ImageStatistics found {len(anomalies)} data anomal"
             f"{'y' if len(anomalies) == 1 else 'ies'}; {outcome}:"]
    lines += [f"  - [{a['code']}{'/' + a['split'] if a['split'] else ''}] {a['message']}"
              for a in anomalies]
    lines.append(f"Inspect {os.path.join(output_uri, artifacts.REPORT_FILE)} and "
                 f"{artifacts.IMAGE_STATS_FILE}, "
                 "fix the data, or set fail_on_anomalies=False (or raise the thresholds).")
    return "\n".join(lines)
