"""ImageTrainer's component spec: TFX's TrainerSpec plus an `image_statistics` input."""

from __future__ import annotations

from tfx.types import component_spec, standard_component_specs

from imgpipe.components.common.formats.artifact_types import (
    ChampionArtifact,
    ImageStatisticsArtifact,
)

IMAGE_STATISTICS_KEY = "image_statistics"
# The ChampionResolver's output: the champion a warm start begins from.
CHAMPION_KEY = "champion"
EXAMPLES_KEY = standard_component_specs.EXAMPLES_KEY
MODEL_KEY = standard_component_specs.MODEL_KEY
MODEL_RUN_KEY = standard_component_specs.MODEL_RUN_KEY
TRAIN_ARGS_KEY = standard_component_specs.TRAIN_ARGS_KEY
EVAL_ARGS_KEY = standard_component_specs.EVAL_ARGS_KEY
RUN_FN_KEY = standard_component_specs.RUN_FN_KEY
CUSTOM_CONFIG_KEY = standard_component_specs.CUSTOM_CONFIG_KEY
# Separate from custom_config so that a Kubeflow run can set them (a runtime parameter
# is a whole execution property): epochs, spans and launcher override the config's.
EPOCHS_KEY = "epochs"
SPANS_KEY = "spans"
LAUNCHER_KEY = "launcher"


class ImageTrainerSpec(standard_component_specs.TrainerSpec):
    """TrainerSpec with the ImageStatistics and ServedChampion artifacts as optional
    inputs, and the epochs, the spans and the launcher as parameters."""

    PARAMETERS = {
        **standard_component_specs.TrainerSpec.PARAMETERS,
        EPOCHS_KEY: component_spec.ExecutionParameter(type=int, optional=True),
        SPANS_KEY: component_spec.ExecutionParameter(type=int, optional=True),
        LAUNCHER_KEY: component_spec.ExecutionParameter(type=str, optional=True),
    }
    INPUTS = {
        **standard_component_specs.TrainerSpec.INPUTS,
        IMAGE_STATISTICS_KEY: component_spec.ChannelParameter(
            type=ImageStatisticsArtifact, optional=True
        ),
        CHAMPION_KEY: component_spec.ChannelParameter(type=ChampionArtifact, optional=True),
    }
