"""From an Examples folder to the image_stats.json document and the report page.

Shared by the TFX executor and `imgpipe stats`; the callers decide where to write.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable
from typing import Any

import apache_beam as beam
import tensorflow as tf

from components.common import artifacts
from components.image_statistics import anomalies as anomaly_lib
from components.image_statistics import report, summary
from components.image_statistics.analyze import AnalysisOptions
from components.image_statistics.compute import run_statistics


@dataclasses.dataclass
class Produced:
    stats: dict[str, Any]
    html: str

    @property
    def anomalies(self) -> list[dict[str, Any]]:
        return self.stats["anomalies"]


def produce(
    examples_uri: str,
    work_parent: str,
    options: AnalysisOptions,
    thresholds: anomaly_lib.Thresholds,
    make_pipeline: Callable[[], beam.Pipeline],
    extra_anomalies: list[dict[str, Any]] | None = None,
) -> Produced:
    """Runs the statistics over every split and checks them.

    Args:
      examples_uri: an ImageExampleGen Examples folder (label_map.json beside Split-*/).
      work_parent: where the pipeline may put intermediate files (removed after).
      options: how images are analysed.
      thresholds: the anomaly thresholds.
      make_pipeline: returns the Beam pipeline to run on.
      extra_anomalies: anomalies found elsewhere (ExampleValidator), listed with ours.
    """
    labels = artifacts.load_labels(examples_uri)
    skipped = artifacts.load_skipped(examples_uri)
    run = run_statistics(examples_uri, work_parent, options, make_pipeline)
    stats = summary.build_stats(
        splits=run.splits, accumulators=run.accumulators, groups=run.groups, labels=labels,
        options=options, examples_uri=examples_uri, skipped=skipped,
        leakage_threshold=thresholds.leakage)
    stats["anomalies"] = anomaly_lib.check(stats, thresholds) + list(extra_anomalies or [])
    thumbnails = {
        split: {summary.label_name(label, labels): [(t.path, t.jpeg) for t in kept]
                for label, kept in accumulator.thumbnails.items()}
        for split, accumulator in run.accumulators.items()}
    return Produced(stats, report.render(stats, thumbnails, skipped))


def write_text(path: str, text: str) -> None:
    with tf.io.gfile.GFile(path, "w") as f:
        f.write(text)
