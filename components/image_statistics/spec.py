"""ImageStatistics' component spec: parameter and channel names, spelled once."""

from __future__ import annotations

from tfx.types import component_spec, standard_artifacts, standard_component_specs

from imgpipe.components.common.formats.artifact_types import (
    ChampionArtifact,
    ImageStatisticsArtifact,
)

EXAMPLES_KEY = standard_component_specs.EXAMPLES_KEY
ANOMALIES_KEY = standard_component_specs.ANOMALIES_KEY
STATISTICS_KEY = standard_component_specs.STATISTICS_KEY
# The model's input geometry, which the pixel statistics are computed at.
IMAGE_SIZE_KEY = "image_size"
CROP_FRACTION_KEY = "crop_fraction"
# StatisticsConfig as JSON (components/image_statistics/config.py).
STATISTICS_CONFIG_KEY = "statistics_config"
# The ChampionResolver's output: the served model whose training statistics drift is
# checked against and which audits the labels (components/common/formats/champion.py).
CHAMPION_KEY = "champion"

# The span whose drift is accepted (StatisticsConfig.accept_drift_span), separate so
# that a Kubeflow run can set it; NO_SPAN for none.
ACCEPT_DRIFT_SPAN_KEY = "accept_drift_span"
# The same for label issues above the gate (StatisticsConfig.accept_label_issues_span).
ACCEPT_LABEL_ISSUES_SPAN_KEY = "accept_label_issues_span"
NO_SPAN = -1

# Custom properties set on the output artifact.
ANOMALY_COUNT_PROPERTY = "anomalies"
IMAGES_PROPERTY = "images"


class ImageStatisticsSpec(component_spec.ComponentSpec):
    """ImageStatistics: `Examples` (and optionally ExampleValidator's anomalies) in,
    an `ImageStatistics` artifact out."""

    PARAMETERS = {
        IMAGE_SIZE_KEY: component_spec.ExecutionParameter(type=int),
        CROP_FRACTION_KEY: component_spec.ExecutionParameter(type=float),
        STATISTICS_CONFIG_KEY: component_spec.ExecutionParameter(type=str),
        ACCEPT_DRIFT_SPAN_KEY: component_spec.ExecutionParameter(type=int, optional=True),
        ACCEPT_LABEL_ISSUES_SPAN_KEY: component_spec.ExecutionParameter(type=int, optional=True),
    }
    INPUTS = {
        EXAMPLES_KEY: component_spec.ChannelParameter(type=standard_artifacts.Examples),
        ANOMALIES_KEY: component_spec.ChannelParameter(
            type=standard_artifacts.ExampleAnomalies, optional=True
        ),
        CHAMPION_KEY: component_spec.ChannelParameter(type=ChampionArtifact, optional=True),
    }
    OUTPUTS = {
        STATISTICS_KEY: component_spec.ChannelParameter(type=ImageStatisticsArtifact),
    }


def validate_geometry(image_size: int, crop_fraction: float) -> None:
    """Raises ValueError when the pixels cannot be computed at this size and crop."""
    if image_size < 1:
        raise ValueError(f"{IMAGE_SIZE_KEY} must be positive, got {image_size}")
    if not 0.0 < crop_fraction <= 1.0:
        raise ValueError(f"{CROP_FRACTION_KEY} must be in (0, 1], got {crop_fraction}")
