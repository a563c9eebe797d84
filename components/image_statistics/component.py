"""ImageStatistics: exact normalization constants, data checks and a report, as a gate
before training."""

from __future__ import annotations

from tfx import types
from tfx.dsl.components.base import base_beam_component, executor_spec

from components.common.preprocessing import DEFAULT_CROP_FRACTION
from components.image_statistics import spec
from components.image_statistics.artifact import ImageStatisticsArtifact
from components.image_statistics.executor import Executor


class ImageStatistics(base_beam_component.BaseBeamComponent):
    """Statistics of an ImageExampleGen `Examples` artifact, checked before training.

    Per split: exact per-channel mean and std of the pixels the model sees (the
    Trainer reads them), size, format and label distributions, duplicates, and
    duplicates across splits (leakage). With fail_on_anomalies the executor raises
    after writing image_stats.json and report.html, so the run stops before training.

    Example:
      stats = ImageStatistics(examples=gen.outputs["examples"],
                              anomalies=validator.outputs["anomalies"])
      trainer_input = stats.outputs["statistics"]
    """

    SPEC_CLASS = spec.ImageStatisticsSpec
    EXECUTOR_SPEC = executor_spec.BeamExecutorSpec(Executor)

    def __init__(
        self,
        examples: types.BaseChannel,
        image_size: int = 224,
        crop_fraction: float = DEFAULT_CROP_FRACTION,
        anomalies: types.BaseChannel | None = None,
        fail_on_anomalies: bool = True,
        leakage_threshold: float = 0.0,
        min_supported_fraction: float = 0.99,
        sample_thumbnails: int = 8,
        native_resolution: bool = False,
    ):
        """Args:
          examples: ImageExampleGen's `Examples` (label_map.json beside the splits).
          image_size: the Trainer's input side; pixels are eval_image's at this size.
          crop_fraction: eval_image's center-crop fraction.
          anomalies: ExampleValidator's `ExampleAnomalies`, gated with ours.
          fail_on_anomalies: raise after writing the outputs when anomalies are found.
          leakage_threshold: largest tolerated fraction of a non-train split's images
            that have an exact copy in another split.
          min_supported_fraction: smallest tolerated fraction of usable images.
          sample_thumbnails: thumbnails per class in the report.
          native_resolution: also compute pixel statistics at the stored size (a second
            decode of every image).
        """
        super().__init__(spec=spec.ImageStatisticsSpec(**{
            spec.EXAMPLES_KEY: examples,
            spec.ANOMALIES_KEY: anomalies,
            spec.IMAGE_SIZE_KEY: image_size,
            spec.CROP_FRACTION_KEY: crop_fraction,
            spec.FAIL_ON_ANOMALIES_KEY: int(fail_on_anomalies),
            spec.LEAKAGE_THRESHOLD_KEY: leakage_threshold,
            spec.MIN_SUPPORTED_FRACTION_KEY: min_supported_fraction,
            spec.SAMPLE_THUMBNAILS_KEY: sample_thumbnails,
            spec.NATIVE_RESOLUTION_KEY: int(native_resolution),
            spec.STATISTICS_KEY: types.Channel(type=ImageStatisticsArtifact),
        }))
