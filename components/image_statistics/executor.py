"""ImageStatistics' executor: validates, computes, writes, then gates."""

from __future__ import annotations

import dataclasses
import functools
import os
import time
from typing import Any

from absl import logging
from tfx import types
from tfx.components.example_gen.utils import FINGERPRINT_PROPERTY_NAME
from tfx.dsl.components.base import base_beam_executor
from tfx.types import artifact_utils

from imgpipe.components.common.formats import acceptances as acceptance_records
from imgpipe.components.common.formats import (
    artifacts,
    image_stats,
    layout,
    manifest,
    serving_history,
    spans,
)
from imgpipe.components.common.formats import champion as champion_lib
from imgpipe.components.common.formats.artifact_types import (
    ADMITTED_BY_ACCEPTANCE_PROPERTY,
    span_of,
)
from imgpipe.components.common.images import label_audit
from imgpipe.components.common.runtime import config_loader, progress
from imgpipe.components.common.storage import disk_full, fileio, outputs
from imgpipe.components.image_statistics import acceptances, baseline, spec
from imgpipe.components.image_statistics import anomalies as anomaly_lib
from imgpipe.components.image_statistics.analyze import AnalysisOptions
from imgpipe.components.image_statistics.config import StatisticsConfig
from imgpipe.components.image_statistics.produce import Produced, produce


def options_from_properties(
    exec_properties: dict[str, Any],
) -> tuple[AnalysisOptions, StatisticsConfig]:
    """Reads and validates the execution properties.

    Raises:
      ValueError: a property is out of range; the message names it.
    """
    image_size = int(exec_properties[spec.IMAGE_SIZE_KEY])
    crop_fraction = float(exec_properties[spec.CROP_FRACTION_KEY])
    spec.validate_geometry(image_size, crop_fraction)
    config = config_loader.from_json(StatisticsConfig, exec_properties[spec.STATISTICS_CONFIG_KEY])
    return analysis_options(image_size, crop_fraction, config), config


def analysis_options(
    image_size: int, crop_fraction: float, config: StatisticsConfig
) -> AnalysisOptions:
    return AnalysisOptions(
        image_size=image_size,
        crop_fraction=crop_fraction,
        keep_thumbnails=config.sample_thumbnails,
        native_resolution=config.native_resolution,
        verify_images=config.verify_images,
    )


class Executor(base_beam_executor.BaseBeamExecutor):
    """Keys: inputs `examples` (Examples), optional `anomalies` (ExampleAnomalies) and
    optional `champion` (ServedChampion: the served model whose training statistics
    drift is checked against and which audits the labels, label_gate.py); parameters
    `image_size`, `crop_fraction`, `statistics_config` (StatisticsConfig JSON) and
    `accept_drift_span`; output `statistics` (ImageStatistics). Splits are the
    Examples' split_names."""

    @disk_full.explained("ImageStatistics", disk_full.first_output)
    def Do(  # noqa: N802 - TFX's executor interface
        self,
        input_dict: dict[str, list[types.Artifact]],
        output_dict: dict[str, list[types.Artifact]],
        exec_properties: dict[str, Any],
    ) -> None:
        options, config = options_from_properties(exec_properties)
        resolved = champion_lib.from_inputs(input_dict.get(spec.CHAMPION_KEY))
        with champion_lib.holding(resolved):
            self._run(input_dict, output_dict, exec_properties, options, config, resolved)

    def _run(
        self,
        input_dict: dict[str, list[types.Artifact]],
        output_dict: dict[str, list[types.Artifact]],
        exec_properties: dict[str, Any],
        options: AnalysisOptions,
        config: StatisticsConfig,
        resolved: champion_lib.Resolved | None,
    ) -> None:
        examples = artifact_utils.get_single_instance(input_dict[spec.EXAMPLES_KEY])
        output = artifact_utils.get_single_instance(output_dict[spec.STATISTICS_KEY])
        splits = artifact_utils.decode_split_names(examples.split_names)
        validator = _validator_anomalies(input_dict)
        logging.info("ImageStatistics: %s %s -> %s", examples.uri, splits, output.uri)
        drift_baseline = baseline.from_champion(resolved or champion_lib.resolve(""))
        logging.info(
            "ImageStatistics: drift baseline %s",
            drift_baseline.uri or f"none: {drift_baseline.reason}",
        )
        # A retried step gets the same URI: nothing of an earlier attempt may stay.
        rejected = output.uri.rstrip("/") + layout.REJECTED_SUFFIX
        outputs.clear(output.uri)
        fileio.remove(rejected)

        span = span_of(examples)
        drift_accepted = accepted_for(exec_properties, spec.ACCEPT_DRIFT_SPAN_KEY, span)
        labels_accepted = accepted_for(exec_properties, spec.ACCEPT_LABEL_ISSUES_SPAN_KEY, span)
        produced = produce(
            examples.uri,
            splits,
            output.uri,
            options,
            config,
            self._make_beam_pipeline,
            validator,
            drift_baseline,
            audit_champion=resolved or champion_lib.resolve(""),
            # `imgpipe run local`'s progress bar, on a terminal; None anywhere else.
            progress_dir=progress.folder_from_env(),
        )
        produced, drift_accepted = _with_drift_accepted(produced, resolved, span, drift_accepted)
        produced = _with_label_issues_accepted(produced, span, labels_accepted)
        if produced.stats.label_audit is not None:
            logging.info(
                "ImageStatistics: label audit %s", label_audit.describe(produced.stats.label_audit)
            )
        _write(output.uri, produced)
        output.set_int_custom_property(spec.ANOMALY_COUNT_PROPERTY, len(produced.anomalies))
        output.set_int_custom_property(spec.IMAGES_PROPERTY, produced.stats.source.images_decoded)
        stopping = anomaly_lib.blocking(produced.anomalies, config, drift_accepted, labels_accepted)
        # Through the gates only because an acceptance let it.
        by_acceptance = not stopping and bool(anomaly_lib.blocking(produced.anomalies, config))
        output.set_int_custom_property(ADMITTED_BY_ACCEPTANCE_PROPERTY, int(by_acceptance))
        # The span folder as ImageExampleGen read it: a later run that finds it changed
        # reads the span again.
        fingerprint = examples.get_string_custom_property(FINGERPRINT_PROPERTY_NAME)
        _admit_or_withdraw(resolved, span, examples.uri, not stopping, by_acceptance, fingerprint)
        if stopping:
            run_id = getattr(self._context, "pipeline_run_id", None) or ""
            _record_stop(resolved, span, stopping, run_id, fingerprint)
        if produced.anomalies:
            _warn_or_stop(
                produced,
                stopping,
                config,
                span,
                drift_accepted,
                labels_accepted,
                output.uri,
                rejected,
            )


def _validator_anomalies(input_dict: dict[str, list[types.Artifact]]) -> list[image_stats.Anomaly]:
    """ExampleValidator's anomalies, when its output is an input; else none."""
    if not input_dict.get(spec.ANOMALIES_KEY):
        return []
    anomalies_artifact = artifact_utils.get_single_instance(input_dict[spec.ANOMALIES_KEY])
    return anomaly_lib.validator_anomalies(
        anomalies_artifact.uri,
        artifact_utils.decode_split_names(anomalies_artifact.split_names),
    )


def _with_drift_accepted(
    produced: Produced,
    resolved: champion_lib.Resolved | None,
    span: int | None,
    drift_accepted: bool,
) -> tuple[Produced, bool]:
    """The statistics with their drift marked accepted, and whether it was, when drift
    was found and an acceptance (_accept_drift) lets it through."""
    drifted = [a for a in produced.anomalies if a.code == anomaly_lib.DRIFT]
    drift = produced.stats.drift
    if not drifted or drift is None:
        return produced, drift_accepted
    note = _accept_drift(resolved, span, drift, drift_accepted)
    if not note:
        return produced, False
    note += ": " + "; ".join(a.message for a in drifted)
    logging.warning("ImageStatistics: drift of %s", note)
    stats = dataclasses.replace(produced.stats, drift=dataclasses.replace(drift, accepted=note))
    return dataclasses.replace(produced, stats=stats), True


def _with_label_issues_accepted(
    produced: Produced, span: int | None, labels_accepted: bool
) -> Produced:
    """The statistics with their label audit marked accepted, when it found too many
    issues and accept_label_issues_span accepts this span."""
    audit = produced.stats.label_audit
    if not (labels_accepted and audit is not None and audit.exceeded):
        return produced
    accepted = f"span {span}, by accept_label_issues_span"
    stats = dataclasses.replace(
        produced.stats, label_audit=dataclasses.replace(audit, accepted=accepted)
    )
    return dataclasses.replace(produced, stats=stats)


def _warn_or_stop(
    produced: Produced,
    stopping: list[image_stats.Anomaly],
    config: StatisticsConfig,
    span: int | None,
    drift_accepted: bool,
    labels_accepted: bool,
    output_uri: str,
    rejected: str,
) -> None:
    """Logs the anomalies that pass the gates; or, when some stop the run, keeps a copy
    of the outputs in `rejected` and raises.

    Raises:
      AnomaliesFoundError: `stopping` is not empty.
    """
    message = functools.partial(
        anomaly_lib.gate_message,
        produced.anomalies,
        config=config,
        span=span,
        drift_accepted=drift_accepted,
        labels_accepted=labels_accepted,
    )
    if not stopping:
        logging.warning("%s", message(output_uri=output_uri))
        return
    # TFX deletes the output folder of a failed execution; this copy stays for the
    # user to inspect.
    _write(rejected, produced)
    raise anomaly_lib.AnomaliesFoundError(stopping, rejected, message(output_uri=rejected), span)


def _admit_or_withdraw(
    resolved: champion_lib.Resolved | None,
    span: int | None,
    examples_uri: str,
    passed: bool,
    by_acceptance: bool,
    input_fingerprint: str,
) -> None:
    """A span through the gates joins the window later runs train on (spans.py), on
    probation when only an acceptance let it through; a span stopped leaves it."""
    if resolved is None or not resolved.serving_dir or span is None:
        return
    if passed:
        labels = tuple(artifacts.load_labels(examples_uri))
        spans.admit(
            resolved.serving_dir, span, examples_uri, labels, by_acceptance, input_fingerprint
        )
    else:
        spans.withdraw(resolved.serving_dir, span)


def _record_stop(
    resolved: champion_lib.Resolved | None,
    span: int | None,
    stopping: list[image_stats.Anomaly],
    run_id: str,
    input_fingerprint: str,
) -> None:
    """Records in the serving folder's history (serving_history.py) that the data gate
    stopped this run; the champion keeps serving. A failed write is logged, never
    raised: the run stops for its anomalies, not for its history."""
    if resolved is None or not resolved.serving_dir:
        return
    reason = "data gate: " + "; ".join(f"[{a.code}] {a.message}" for a in stopping)
    decision = serving_history.Decision(
        time=time.time(),
        kind=serving_history.STOPPED,
        span=span,
        served_version=resolved.champion_version,
        reason=serving_history.brief(reason),
        run_id=run_id,
        input_fingerprint=input_fingerprint,
    )
    try:
        serving_history.record(resolved.serving_dir, decision)
    except OSError as e:
        logging.warning("ImageStatistics: the history record was not written: %s", e)


def _accept_drift(
    resolved: champion_lib.Resolved | None,
    span: int | None,
    drift: image_stats.Drift,
    accepted_now: bool,
) -> str:
    """How this span's drift is accepted ("" when it is not): by accept_drift_span, then
    recorded for the later spans (acceptances.py), or as the same change an earlier span
    accepted against the same champion."""
    version = resolved.champion_version if resolved is not None else None
    serving_dir = resolved.serving_dir if resolved is not None else ""
    if accepted_now:
        if version is not None and serving_dir and span is not None:
            acceptance_records.record(serving_dir, version, span, drift)
        return f"span {span}: accepted by accept_drift_span"
    if version is None or not serving_dir:
        return ""
    earlier = acceptances.still_accepted(resolved.acceptances if resolved else (), drift)
    if earlier is None:
        return ""
    return (
        f"span {span}: the change accepted at span {earlier.span} against champion "
        f"{version}, not served yet"
    )


def accepted_for(exec_properties: dict[str, Any], key: str, span: int | None) -> bool:
    """Whether the acceptance property `key` names this span."""
    value = exec_properties.get(key)
    accepted_span = spec.NO_SPAN if value is None else int(value)
    return accepted_span != spec.NO_SPAN and accepted_span == span


def _write(folder: str, produced: Produced) -> None:
    """Writes the statistics and the report, then the manifest."""
    fileio.makedirs(folder)
    image_stats.write(folder, produced.stats)
    fileio.write_text(os.path.join(folder, layout.REPORT_FILE), produced.html)
    manifest.write(folder, manifest.describe(folder, [layout.IMAGE_STATS_FILE, layout.REPORT_FILE]))
