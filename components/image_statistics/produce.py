"""From an Examples folder to the statistics and the report page.

Shared by the TFX executor and `imgpipe stats`; the callers decide where to write.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Sequence

import apache_beam as beam

from imgpipe.components.common.formats import (
    artifacts,
    conversion_summary,
    image_stats,
    layout,
    manifest,
)
from imgpipe.components.common.formats import champion as champion_lib
from imgpipe.components.image_statistics import anomalies as anomaly_lib
from imgpipe.components.image_statistics import drift as drift_lib
from imgpipe.components.image_statistics import label_audit_report, label_gate, report, summary
from imgpipe.components.image_statistics.analyze import AnalysisOptions
from imgpipe.components.image_statistics.baseline import Baseline
from imgpipe.components.image_statistics.compute import StatisticsRun, run_statistics
from imgpipe.components.image_statistics.config import StatisticsConfig


@dataclasses.dataclass(frozen=True)
class Produced:
    stats: image_stats.ImageStats
    html: str

    @property
    def anomalies(self) -> tuple[image_stats.Anomaly, ...]:
        return self.stats.anomalies


def produce(
    examples_uri: str,
    splits: Sequence[str] | None,
    work_parent: str,
    options: AnalysisOptions,
    config: StatisticsConfig,
    make_pipeline: Callable[[], beam.Pipeline],
    extra_anomalies: Sequence[image_stats.Anomaly] = (),
    baseline: Baseline | None = None,
    audit_champion: champion_lib.Resolved | None = None,
    progress_dir: str | None = None,
) -> Produced:
    """Runs the statistics over the splits and checks them.

    Args:
      examples_uri: an ImageExampleGen Examples folder (label_map.json beside Split-*/).
      splits: the split names to analyse (the artifact's split_names); None for every
        split the conversion wrote.
      work_parent: where the pipeline may put intermediate files (removed after).
      options: how images are analysed.
      config: the thresholds of the anomaly checks.
      make_pipeline: returns the Beam pipeline to run on.
      extra_anomalies: anomalies found elsewhere (ExampleValidator), listed with ours.
      baseline: the served model's training statistics to check drift against, or
        why there are none; None: no drift check asked for (stats.drift is None).
      audit_champion: the resolved champion that audits the labels
        (label_gate.before_training); None: no label audit asked for
        (stats.label_audit is None).
      progress_dir: a local folder for a progress bar of the records analysed
        (compute.run_statistics); None for none.

    Raises:
      IncompleteOutputError: the Examples are not complete (manifest.verify), before
        anything is read.
    """
    manifest.verify(examples_uri)
    if splits is None:
        splits = conversion_summary.read(examples_uri).split_names
    labels = artifacts.load_labels(examples_uri)
    skipped = _skipped_files(examples_uri)
    left_out = _conflicts_left_out(examples_uri)
    run = run_statistics(examples_uri, splits, work_parent, options, make_pipeline, progress_dir)
    stats = summary.build_stats(
        splits=run.splits,
        accumulators=run.accumulators,
        groups=run.groups,
        labels=labels,
        options=options,
        examples_uri=examples_uri,
        skipped=sum(row.path not in left_out for row in skipped),
        leakage_threshold=config.leakage_threshold,
    )
    drift = _drift(baseline, stats, config)
    audited = (
        label_gate.before_training(audit_champion, examples_uri, splits, config)
        if audit_champion is not None
        else None
    )
    audit = audited.result if audited is not None else None
    audit_listing = f"{layout.REPORT_FILE} ({label_audit_report.TITLE})"
    stats = dataclasses.replace(
        stats,
        anomalies=tuple(
            anomaly_lib.check(stats, config)
            + drift_lib.anomalies(drift)
            + label_gate.anomalies(audit, audit_listing, config)
            + list(extra_anomalies)
        ),
        drift=drift,
        label_audit=audit,
    )
    return Produced(
        stats,
        report.render(
            stats, _thumbnails(run, labels), skipped, audited.thumbnails if audited else ()
        ),
    )


def _skipped_files(examples_uri: str) -> list[image_stats.FileReason]:
    return [
        image_stats.FileReason(path=row["path"], reason=row["reason"])
        for row in artifacts.load_skipped(examples_uri)
    ]


def _conflicts_left_out(examples_uri: str) -> set[str]:
    """The paths of label conflicts left out on purpose (on_label_conflict skip): they
    are listed with the skipped files, but not counted as unusable images."""
    converted = conversion_summary.read_if_present(examples_uri)
    return {
        path
        for conflict in (converted.label_conflicts if converted else ())
        if not conflict.kept
        for path in conflict.paths
    }


def _drift(
    baseline: Baseline | None, stats: image_stats.ImageStats, config: StatisticsConfig
) -> image_stats.Drift | None:
    """The drift from `baseline`, or why it was not checked; None: no check asked for."""
    if baseline is None:
        return None
    drift = (
        drift_lib.compare(baseline.stats, stats, config, baseline.uri)
        if baseline.stats is not None
        else drift_lib.skipped(baseline.reason)
    )
    if baseline.note:  # damaged pushes passed over to find the baseline
        drift = dataclasses.replace(
            drift, reason="; ".join(filter(None, [baseline.note, drift.reason]))
        )
    return drift


def _thumbnails(run: StatisticsRun, labels: list[str]) -> report.Thumbnails:
    """Each split's kept thumbnails, (path, JPEG) by label name, for the report."""
    return {
        split: {
            summary.label_name(label, labels): [(t.path, t.jpeg) for t in kept]
            for label, kept in accumulator.thumbnails.items()
        }
        for split, accumulator in run.accumulators.items()
    }
