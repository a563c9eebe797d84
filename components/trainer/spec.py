"""ImageTrainer's component spec: TFX's TrainerSpec plus an `image_statistics` input."""

from __future__ import annotations

from tfx import types
from tfx.types import channel, component_spec, standard_component_specs

IMAGE_STATISTICS_KEY = "image_statistics"
EXAMPLES_KEY = standard_component_specs.EXAMPLES_KEY
MODEL_KEY = standard_component_specs.MODEL_KEY
MODEL_RUN_KEY = standard_component_specs.MODEL_RUN_KEY
TRAIN_ARGS_KEY = standard_component_specs.TRAIN_ARGS_KEY
EVAL_ARGS_KEY = standard_component_specs.EVAL_ARGS_KEY
RUN_FN_KEY = standard_component_specs.RUN_FN_KEY
CUSTOM_CONFIG_KEY = standard_component_specs.CUSTOM_CONFIG_KEY


class ImageStatisticsType(types.Artifact):
    """The TYPE_NAME components/image_statistics publishes; named here only for the spec."""

    TYPE_NAME = "ImageStatistics"


class AnyArtifactChannel(component_spec.ChannelParameter):
    """A channel parameter that accepts a channel of any artifact type.

    The Trainer only needs the artifact's URI (image_stats.json inside), so it does not
    import the ImageStatistics component's artifact class to type-check against it.
    """

    def type_check(self, arg_name: str, value: channel.BaseChannel) -> None:
        if not isinstance(value, channel.BaseChannel):
            raise TypeError(f"Argument {arg_name} should be a Channel, got {value!r}")


class ImageTrainerSpec(standard_component_specs.TrainerSpec):
    """TrainerSpec with the ImageStatistics artifact as an optional input."""

    INPUTS = {
        **standard_component_specs.TrainerSpec.INPUTS,
        IMAGE_STATISTICS_KEY: AnyArtifactChannel(type=ImageStatisticsType, optional=True),
    }
