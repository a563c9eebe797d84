"""ImageStatistics' component spec: parameter and channel names, spelled once."""

from __future__ import annotations

from tfx.types import component_spec, standard_artifacts, standard_component_specs

from components.image_statistics.artifact import ImageStatisticsArtifact

EXAMPLES_KEY = standard_component_specs.EXAMPLES_KEY
ANOMALIES_KEY = standard_component_specs.ANOMALIES_KEY
STATISTICS_KEY = standard_component_specs.STATISTICS_KEY
IMAGE_SIZE_KEY = "image_size"
CROP_FRACTION_KEY = "crop_fraction"
FAIL_ON_ANOMALIES_KEY = "fail_on_anomalies"
LEAKAGE_THRESHOLD_KEY = "leakage_threshold"
MIN_SUPPORTED_FRACTION_KEY = "min_supported_fraction"
SAMPLE_THUMBNAILS_KEY = "sample_thumbnails"
NATIVE_RESOLUTION_KEY = "native_resolution"

# Custom properties set on the output artifact.
ANOMALY_COUNT_PROPERTY = "anomalies"
IMAGES_PROPERTY = "images"


class ImageStatisticsSpec(component_spec.ComponentSpec):
    """ImageStatistics: `Examples` (and optionally ExampleValidator's anomalies) in,
    an `ImageStatistics` artifact out."""

    PARAMETERS = {
        IMAGE_SIZE_KEY: component_spec.ExecutionParameter(type=int),
        CROP_FRACTION_KEY: component_spec.ExecutionParameter(type=float),
        # ints, not bools: they travel through MLMD and KFP, where 0/1 is unambiguous.
        FAIL_ON_ANOMALIES_KEY: component_spec.ExecutionParameter(type=int),
        LEAKAGE_THRESHOLD_KEY: component_spec.ExecutionParameter(type=float),
        MIN_SUPPORTED_FRACTION_KEY: component_spec.ExecutionParameter(type=float),
        SAMPLE_THUMBNAILS_KEY: component_spec.ExecutionParameter(type=int),
        NATIVE_RESOLUTION_KEY: component_spec.ExecutionParameter(type=int),
    }
    INPUTS = {
        EXAMPLES_KEY: component_spec.ChannelParameter(type=standard_artifacts.Examples),
        ANOMALIES_KEY: component_spec.ChannelParameter(
            type=standard_artifacts.ExampleAnomalies, optional=True),
    }
    OUTPUTS = {
        STATISTICS_KEY: component_spec.ChannelParameter(type=ImageStatisticsArtifact),
    }
