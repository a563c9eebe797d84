"""ImageStatistics' executor: validates, computes, writes, then gates."""

from __future__ import annotations

import os
from typing import Any

import tensorflow as tf
from absl import logging
from tfx import types
from tfx.dsl.components.base import base_beam_executor
from tfx.types import artifact_utils

from components.common import artifacts
from components.image_statistics import anomalies as anomaly_lib
from components.image_statistics import spec
from components.image_statistics.analyze import AnalysisOptions
from components.image_statistics.produce import Produced, produce, write_text

# Beside the output folder: where the outputs of a run stopped by the gate stay.
REJECTED_SUFFIX = ".rejected"


def options_from_properties(exec_properties: dict[str, Any]
                            ) -> tuple[AnalysisOptions, anomaly_lib.Thresholds]:
    """Reads and validates the execution properties.

    Raises:
      ValueError: a property is out of range; the message names it.
    """
    options = AnalysisOptions(
        image_size=int(exec_properties[spec.IMAGE_SIZE_KEY]),
        crop_fraction=float(exec_properties[spec.CROP_FRACTION_KEY]),
        keep_thumbnails=int(exec_properties[spec.SAMPLE_THUMBNAILS_KEY]),
        native_resolution=bool(exec_properties.get(spec.NATIVE_RESOLUTION_KEY, 0)))
    if options.image_size < 1:
        raise ValueError(f"{spec.IMAGE_SIZE_KEY} must be positive, got {options.image_size}")
    if not 0.0 < options.crop_fraction <= 1.0:
        raise ValueError(f"{spec.CROP_FRACTION_KEY} must be in (0, 1], "
                         f"got {options.crop_fraction}")
    if options.keep_thumbnails < 0:
        raise ValueError(f"{spec.SAMPLE_THUMBNAILS_KEY} must be >= 0, "
                         f"got {options.keep_thumbnails}")
    thresholds = anomaly_lib.Thresholds(
        leakage=float(exec_properties[spec.LEAKAGE_THRESHOLD_KEY]),
        min_supported_fraction=float(exec_properties[spec.MIN_SUPPORTED_FRACTION_KEY]))
    thresholds.validate()
    return options, thresholds


class Executor(base_beam_executor.BaseBeamExecutor):
    def Do(  # noqa: N802 - TFX's executor interface
        self,
        input_dict: dict[str, list[types.Artifact]],
        output_dict: dict[str, list[types.Artifact]],
        exec_properties: dict[str, Any],
    ) -> None:
        options, thresholds = options_from_properties(exec_properties)
        examples = artifact_utils.get_single_instance(input_dict[spec.EXAMPLES_KEY])
        output = artifact_utils.get_single_instance(output_dict[spec.STATISTICS_KEY])
        validator = []
        if input_dict.get(spec.ANOMALIES_KEY):
            anomalies_artifact = artifact_utils.get_single_instance(
                input_dict[spec.ANOMALIES_KEY])
            validator = anomaly_lib.validator_anomalies(
                anomalies_artifact.uri,
                artifact_utils.decode_split_names(anomalies_artifact.split_names))
        logging.info("ImageStatistics: %s -> %s", examples.uri, output.uri)

        produced = produce(examples.uri, output.uri, options, thresholds,
                           self._make_beam_pipeline, validator)
        _write(output.uri, produced)
        output.set_int_custom_property(spec.ANOMALY_COUNT_PROPERTY, len(produced.anomalies))
        output.set_int_custom_property(spec.IMAGES_PROPERTY,
                                       int(produced.stats["source"]["images_decoded"]))
        if not produced.anomalies:
            return
        if not exec_properties[spec.FAIL_ON_ANOMALIES_KEY]:
            logging.warning("%s", anomaly_lib.gate_message(produced.anomalies, output.uri,
                                                           failing=False))
            return
        # TFX deletes the output folder of a failed execution; this copy stays for the
        # user to inspect.
        rejected = output.uri.rstrip("/") + REJECTED_SUFFIX
        _write(rejected, produced)
        raise anomaly_lib.AnomaliesFoundError(
            anomaly_lib.gate_message(produced.anomalies, rejected))


def _write(folder: str, produced: Produced) -> None:
    tf.io.gfile.makedirs(folder)
    artifacts.write_json(os.path.join(folder, artifacts.IMAGE_STATS_FILE), produced.stats)
    write_text(os.path.join(folder, artifacts.REPORT_FILE), produced.html)
