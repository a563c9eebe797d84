"""ImageEvaluator: blesses a candidate model against the served champion.

The champion is the ChampionResolver's output, resolved once at the head of the run
(components/common/formats/champion.py); the executor evaluates both models'
`serving_examples` signatures on the same images, compares them image by image, and
decides by the rules in config.py. Its
`blessing` output is the standard ModelBlessing TFX's Pusher checks; `evaluation`
holds evaluation.json (evaluation.py) with both models' metrics and the decision.
"""

from __future__ import annotations

from tfx import types
from tfx.dsl.components.base import base_component, executor_spec
from tfx.orchestration import data_types
from tfx.types import standard_artifacts

from imgpipe.components.common.formats.layout import EVAL_SPLIT
from imgpipe.components.common.runtime import config_loader
from imgpipe.components.evaluator import spec
from imgpipe.components.evaluator.config import EvaluatorConfig
from imgpipe.components.evaluator.executor import Executor


class ImageEvaluator(base_component.BaseComponent):
    """Evaluates `model` on the eval split of `examples`, beside the served champion.

    Example:
      evaluator = ImageEvaluator(gen.outputs["examples"], trainer.outputs["model"],
                                 EvaluatorConfig(tolerance=0.02),
                                 champion=resolver.outputs["champion"])
      Pusher(model=trainer.outputs["model"], model_blessing=evaluator.outputs["blessing"],
             push_destination=...)
    """

    SPEC_CLASS = spec.ImageEvaluatorSpec
    EXECUTOR_SPEC = executor_spec.ExecutorClassSpec(Executor)

    def __init__(
        self,
        examples: types.BaseChannel,
        model: types.BaseChannel,
        config: EvaluatorConfig | None = None,
        champion: types.BaseChannel | None = None,
        eval_split: str = EVAL_SPLIT,
        tolerance: float | data_types.RuntimeParameter | None = None,
    ):
        """Args:
          examples: ImageExampleGen's `Examples` channel.
          model: the Trainer's `model` channel: the candidate.
          config: the blessing rules.
          champion: the ChampionResolver's `champion`; None applies the floor alone.
          eval_split: the split both models are evaluated on.
          tolerance: overrides config.tolerance (a Kubeflow runtime parameter).

        Raises:
          ValueError: a bad setting, named.
        """
        config = config or EvaluatorConfig()
        config.validate()
        super().__init__(
            spec=spec.ImageEvaluatorSpec(
                **{
                    spec.EXAMPLES_KEY: examples,
                    spec.MODEL_KEY: model,
                    spec.EVALUATOR_CONFIG_KEY: config_loader.to_json(config),
                    spec.TOLERANCE_KEY: config.tolerance if tolerance is None else tolerance,
                    spec.CHAMPION_KEY: champion,
                    spec.EVAL_SPLIT_KEY: eval_split,
                    spec.EVALUATION_KEY: types.Channel(type=standard_artifacts.ModelEvaluation),
                    spec.BLESSING_KEY: types.Channel(type=standard_artifacts.ModelBlessing),
                }
            )
        )
