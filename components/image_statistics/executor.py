"""ImageStatistics' executor: validates, computes, writes, then gates."""

from __future__ import annotations

import dataclasses
import functools
import os
from typing import Any

from absl import logging
from tfx import types
from tfx.dsl.components.base import base_beam_executor
from tfx.types import artifact_utils

from imgpipe.components.common.formats import image_stats, layout, manifest
from imgpipe.components.common.images import label_audit
from imgpipe.components.common.runtime import config_loader
from imgpipe.components.common.storage import disk_full, fileio, outputs
from imgpipe.components.image_statistics import anomalies as anomaly_lib
from imgpipe.components.image_statistics import baseline, spec
from imgpipe.components.image_statistics.analyze import AnalysisOptions
from imgpipe.components.image_statistics.config import StatisticsConfig
from imgpipe.components.image_statistics.produce import Produced, produce

# The Examples artifact's span, as TFX's ExampleGen driver records it.
SPAN = "span"
# Beside the output folder: where the outputs of a run stopped by the gate stay.
REJECTED_SUFFIX = ".rejected"


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
    """Keys: inputs `examples` (Examples) and optional `anomalies` (ExampleAnomalies);
    parameters `image_size`, `crop_fraction`, `statistics_config` (StatisticsConfig
    JSON) and `serving_dir` (the served model, whose training statistics drift is
    checked against and which audits the labels, label_gate.py; "" for none); output
    `statistics` (ImageStatistics). Splits are the Examples' split_names."""

    @disk_full.explained("ImageStatistics", disk_full.first_output)
    def Do(  # noqa: N802 - TFX's executor interface
        self,
        input_dict: dict[str, list[types.Artifact]],
        output_dict: dict[str, list[types.Artifact]],
        exec_properties: dict[str, Any],
    ) -> None:
        options, config = options_from_properties(exec_properties)
        examples = artifact_utils.get_single_instance(input_dict[spec.EXAMPLES_KEY])
        output = artifact_utils.get_single_instance(output_dict[spec.STATISTICS_KEY])
        splits = artifact_utils.decode_split_names(examples.split_names)
        validator = []
        if input_dict.get(spec.ANOMALIES_KEY):
            anomalies_artifact = artifact_utils.get_single_instance(input_dict[spec.ANOMALIES_KEY])
            validator = anomaly_lib.validator_anomalies(
                anomalies_artifact.uri,
                artifact_utils.decode_split_names(anomalies_artifact.split_names),
            )
        logging.info("ImageStatistics: %s %s -> %s", examples.uri, splits, output.uri)
        drift_baseline = baseline.from_serving_dir(exec_properties.get(spec.SERVING_DIR_KEY) or "")
        logging.info(
            "ImageStatistics: drift baseline %s",
            drift_baseline.uri or f"none: {drift_baseline.reason}",
        )
        # A retried step gets the same URI: nothing of an earlier attempt may stay.
        rejected = output.uri.rstrip("/") + REJECTED_SUFFIX
        outputs.clear(output.uri)
        fileio.remove(rejected)

        span = span_of(examples)
        value = exec_properties.get(spec.ACCEPT_DRIFT_SPAN_KEY)
        accepted_span = spec.NO_SPAN if value is None else int(value)
        drift_accepted = accepted_span != spec.NO_SPAN and accepted_span == span
        produced = produce(
            examples.uri,
            splits,
            output.uri,
            options,
            config,
            self._make_beam_pipeline,
            validator,
            drift_baseline,
            audit_serving_dir=exec_properties.get(spec.SERVING_DIR_KEY) or "",
        )
        drifted = [a for a in produced.anomalies if a.code == anomaly_lib.DRIFT]
        if drift_accepted and drifted and produced.stats.drift is not None:
            note = f"span {span}: accepted by accept_drift_span: " + "; ".join(
                a.message for a in drifted
            )
            produced = dataclasses.replace(
                produced,
                stats=dataclasses.replace(
                    produced.stats,
                    drift=dataclasses.replace(produced.stats.drift, accepted=note),
                ),
            )
            logging.warning("ImageStatistics: drift of %s", note)
        if produced.stats.label_audit is not None:
            logging.info(
                "ImageStatistics: label audit %s", label_audit.describe(produced.stats.label_audit)
            )
        _write(output.uri, produced)
        output.set_int_custom_property(spec.ANOMALY_COUNT_PROPERTY, len(produced.anomalies))
        output.set_int_custom_property(spec.IMAGES_PROPERTY, produced.stats.source.images_decoded)
        if not produced.anomalies:
            return
        message = functools.partial(
            anomaly_lib.gate_message,
            produced.anomalies,
            config=config,
            span=span,
            drift_accepted=drift_accepted,
        )
        stopping = anomaly_lib.blocking(produced.anomalies, config, drift_accepted)
        if not stopping:
            logging.warning("%s", message(output_uri=output.uri))
            return
        # TFX deletes the output folder of a failed execution; this copy stays for the
        # user to inspect.
        _write(rejected, produced)
        raise anomaly_lib.AnomaliesFoundError(
            stopping, rejected, message(output_uri=rejected), span
        )


def span_of(examples: types.Artifact) -> int | None:
    """The span of an Examples artifact: TFX's ExampleGen driver records it as a custom
    property; an executor may set the type's own property. None when neither is set."""
    if examples.has_custom_property(SPAN):
        return int(examples.get_int_custom_property(SPAN))
    if examples.has_property(SPAN):
        return int(examples.span)
    return None


def _write(folder: str, produced: Produced) -> None:
    """Writes the statistics and the report, then the manifest."""
    fileio.makedirs(folder)
    image_stats.write(folder, produced.stats)
    fileio.write_text(os.path.join(folder, layout.REPORT_FILE), produced.html)
    manifest.write(folder, manifest.describe(folder, [layout.IMAGE_STATS_FILE, layout.REPORT_FILE]))
