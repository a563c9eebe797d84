"""ImageTrainer's component spec: TFX's TrainerSpec plus an `image_statistics` input."""

from __future__ import annotations

from tfx.types import component_spec, standard_component_specs

from imgpipe.components.common.formats.artifact_types import ImageStatisticsArtifact

IMAGE_STATISTICS_KEY = "image_statistics"
EXAMPLES_KEY = standard_component_specs.EXAMPLES_KEY
MODEL_KEY = standard_component_specs.MODEL_KEY
MODEL_RUN_KEY = standard_component_specs.MODEL_RUN_KEY
TRAIN_ARGS_KEY = standard_component_specs.TRAIN_ARGS_KEY
EVAL_ARGS_KEY = standard_component_specs.EVAL_ARGS_KEY
RUN_FN_KEY = standard_component_specs.RUN_FN_KEY
CUSTOM_CONFIG_KEY = standard_component_specs.CUSTOM_CONFIG_KEY
# Separate from custom_config so that a Kubeflow run can set them (a runtime parameter
# is a whole execution property): epochs overrides the config's; serving_dir is where
# a warm start finds the champion.
EPOCHS_KEY = "epochs"
SERVING_DIR_KEY = "serving_dir"


class ImageTrainerSpec(standard_component_specs.TrainerSpec):
    """TrainerSpec with the ImageStatistics artifact as an optional input, and the
    epochs and serving directory as parameters."""

    PARAMETERS = {
        **standard_component_specs.TrainerSpec.PARAMETERS,
        EPOCHS_KEY: component_spec.ExecutionParameter(type=int, optional=True),
        SERVING_DIR_KEY: component_spec.ExecutionParameter(type=str, optional=True),
    }
    INPUTS = {
        **standard_component_specs.TrainerSpec.INPUTS,
        IMAGE_STATISTICS_KEY: component_spec.ChannelParameter(
            type=ImageStatisticsArtifact, optional=True
        ),
    }
