"""ImageStatistics: exact normalization constants, data checks and a report, as a gate
before training."""

from __future__ import annotations

from tfx import types
from tfx.dsl.components.base import base_beam_component, executor_spec
from tfx.orchestration import data_types

from imgpipe.components.common.formats.artifact_types import ImageStatisticsArtifact
from imgpipe.components.common.images.model_input import DEFAULT_CROP_FRACTION, DEFAULT_IMAGE_SIZE
from imgpipe.components.common.runtime import config_loader
from imgpipe.components.image_statistics import spec
from imgpipe.components.image_statistics.config import StatisticsConfig
from imgpipe.components.image_statistics.executor import Executor


class ImageStatistics(base_beam_component.BaseBeamComponent):
    """Statistics of an ImageExampleGen `Examples` artifact, checked before training.

    Per split: exact per-channel mean and std of the pixels the model sees (the
    Trainer reads them), size, format and label distributions, duplicates, and
    duplicates across splits (leakage), and drift from the data the served model (the
    ChampionResolver's `champion`) was trained on. With config.fail_on_anomalies (and
    fail_on_drift for drift) the executor raises after writing image_stats.json and
    report.html, so the run stops before training.

    Example:
      stats = ImageStatistics(examples=gen.outputs["examples"],
                              anomalies=validator.outputs["anomalies"],
                              config=StatisticsConfig(leakage_threshold=0.01))
      trainer_input = stats.outputs["statistics"]
    """

    SPEC_CLASS = spec.ImageStatisticsSpec
    EXECUTOR_SPEC = executor_spec.BeamExecutorSpec(Executor)

    def __init__(
        self,
        examples: types.BaseChannel,
        image_size: int = DEFAULT_IMAGE_SIZE,
        crop_fraction: float = DEFAULT_CROP_FRACTION,
        anomalies: types.BaseChannel | None = None,
        config: StatisticsConfig | None = None,
        champion: types.BaseChannel | None = None,
        accept_drift_span: int | data_types.RuntimeParameter | None = None,
        accept_label_issues_span: int | data_types.RuntimeParameter | None = None,
    ):
        """Args:
          examples: ImageExampleGen's `Examples` (label_map.json beside the splits).
          image_size: the Trainer's input side; pixels are eval_image's at this size.
          crop_fraction: eval_image's center-crop fraction.
          anomalies: ExampleValidator's `ExampleAnomalies`, gated with ours.
          config: thumbnails, thresholds and the gate.
          champion: the ChampionResolver's `champion`: its training statistics are the
            drift baseline, and it audits the labels (None: neither).
          accept_drift_span: overrides config.accept_drift_span (a Kubeflow runtime
            parameter; spec.NO_SPAN for none).
          accept_label_issues_span: overrides config.accept_label_issues_span, the same
            way.

        Raises:
          ValueError: a bad setting, named.
        """
        config = config or StatisticsConfig()
        config.validate()
        spec.validate_geometry(image_size, crop_fraction)
        super().__init__(
            spec=spec.ImageStatisticsSpec(
                **{
                    spec.EXAMPLES_KEY: examples,
                    spec.ANOMALIES_KEY: anomalies,
                    spec.IMAGE_SIZE_KEY: image_size,
                    spec.CROP_FRACTION_KEY: crop_fraction,
                    spec.STATISTICS_CONFIG_KEY: config_loader.to_json(config),
                    spec.CHAMPION_KEY: champion,
                    spec.ACCEPT_DRIFT_SPAN_KEY: (
                        accept_drift_span
                        if accept_drift_span is not None
                        else (
                            spec.NO_SPAN
                            if config.accept_drift_span is None
                            else config.accept_drift_span
                        )
                    ),
                    spec.ACCEPT_LABEL_ISSUES_SPAN_KEY: _span_or_none(
                        accept_label_issues_span, config.accept_label_issues_span
                    ),
                    spec.STATISTICS_KEY: types.Channel(type=ImageStatisticsArtifact),
                }
            )
        )


def _span_or_none(
    parameter: int | data_types.RuntimeParameter | None, configured: int | None
) -> int | data_types.RuntimeParameter:
    if parameter is not None:
        return parameter
    return spec.NO_SPAN if configured is None else configured
