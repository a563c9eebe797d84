"""ImageEvaluator's component spec: parameter and channel names, spelled once."""

from __future__ import annotations

from tfx.types import component_spec, standard_artifacts, standard_component_specs

from imgpipe.components.common.formats import record_holder
from imgpipe.components.common.formats.artifact_types import ChampionArtifact

EXAMPLES_KEY = standard_component_specs.EXAMPLES_KEY
MODEL_KEY = standard_component_specs.MODEL_KEY
EVALUATION_KEY = standard_component_specs.EVALUATION_KEY
BLESSING_KEY = standard_component_specs.BLESSING_KEY
# EvaluatorConfig as JSON (components/evaluator/config.py).
EVALUATOR_CONFIG_KEY = "evaluator_config"
# Separate from the config so that a Kubeflow run can set them (a runtime parameter
# is a whole execution property).
TOLERANCE_KEY = "tolerance"
EVAL_SPLIT_KEY = "eval_split"
# The ChampionResolver's output: the served model the candidate is compared with.
CHAMPION_KEY = "champion"

# On the blessing artifact: TFX's Pusher pushes when `blessed` is 1.
BLESSED_PROPERTY = "blessed"
REASON_PROPERTY = "reason"
CHAMPION_PROPERTY = "champion"
RECORD_PROPERTY = record_holder.BLESSING_PROPERTY
RECORD_REASON_PROPERTY = record_holder.BLESSING_REASON_PROPERTY
# TFX's validators mark the blessing folder with one of these empty files.
BLESSED_FILE = "BLESSED"
NOT_BLESSED_FILE = "NOT_BLESSED"


class ImageEvaluatorSpec(component_spec.ComponentSpec):
    """Examples and the candidate Model in; ModelEvaluation and ModelBlessing out."""

    PARAMETERS = {
        EVALUATOR_CONFIG_KEY: component_spec.ExecutionParameter(type=str),
        TOLERANCE_KEY: component_spec.ExecutionParameter(type=float),
        EVAL_SPLIT_KEY: component_spec.ExecutionParameter(type=str),
    }
    INPUTS = {
        EXAMPLES_KEY: component_spec.ChannelParameter(type=standard_artifacts.Examples),
        MODEL_KEY: component_spec.ChannelParameter(type=standard_artifacts.Model),
        CHAMPION_KEY: component_spec.ChannelParameter(type=ChampionArtifact, optional=True),
    }
    OUTPUTS = {
        EVALUATION_KEY: component_spec.ChannelParameter(type=standard_artifacts.ModelEvaluation),
        BLESSING_KEY: component_spec.ChannelParameter(type=standard_artifacts.ModelBlessing),
    }
