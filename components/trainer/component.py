"""ImageTrainer: TFX's Trainer that also reads the ImageStatistics artifact."""

from __future__ import annotations

from tfx import types
from tfx.components import Trainer
from tfx.dsl.components.base import base_component, executor_spec
from tfx.orchestration import data_types
from tfx.proto import trainer_pb2
from tfx.types import standard_artifacts
from tfx.utils import json_utils

from imgpipe.components.common.formats.layout import EVAL_SPLIT, TRAIN_SPLIT
from imgpipe.components.trainer import spec
from imgpipe.components.trainer.config import TrainerConfig, to_custom_config
from imgpipe.components.trainer.executor import Executor

DEFAULT_RUN_FN = "imgpipe.components.trainer.task.run_fn"


class ImageTrainer(Trainer):
    """Trains and exports the image classifier (imgpipe.components.trainer.task.run_fn).

    Outputs are TFX Trainer's: `model` (the SavedModel under Format-Serving, whose
    serving_default signature takes encoded image bytes) and `model_run` (TensorBoard
    logs, preemption backups).

    Example:
      ImageTrainer(examples=gen.outputs["examples"],
                   image_statistics=stats.outputs["statistics"],
                   config=TrainerConfig(backbone="mobilenet_v3_small", epochs=10))
    """

    SPEC_CLASS = spec.ImageTrainerSpec
    EXECUTOR_SPEC = executor_spec.ExecutorClassSpec(Executor)

    def __init__(
        self,
        examples: types.BaseChannel,
        image_statistics: types.BaseChannel | None = None,
        config: TrainerConfig | None = None,
        run_fn: str = DEFAULT_RUN_FN,
        champion: types.BaseChannel | None = None,
        epochs: int | data_types.RuntimeParameter | None = None,
        spans: int | data_types.RuntimeParameter | None = None,
        launcher: str | data_types.RuntimeParameter | None = None,
        train_split: str = TRAIN_SPLIT,
        eval_split: str = EVAL_SPLIT,
    ):
        """Args:
          examples: ImageExampleGen's `Examples` channel.
          image_statistics: the ImageStatistics channel (mean and std); optional only
            when the config sets mean and std.
          config: the training settings; train_steps and eval_steps become TFX's
            TrainArgs and EvalArgs, the whole config its custom_config.
          run_fn: dotted path of the training function.
          champion: the ChampionResolver's `champion`, for config.warm_start.
          epochs: overrides config.epochs (a Kubeflow runtime parameter).
          spans: overrides config.spans, the window of spans (the same).
          launcher: overrides config.launcher, what the step launches its workers as
            on Kubeflow (the same).
          train_split: the split trained on.
          eval_split: the split validated on during training.

        Raises:
          ValueError: a bad setting, named.
          TypeError: image_statistics is not a channel of ImageStatistics artifacts.
        """
        config = config or TrainerConfig()
        config.validate()
        base_component.BaseComponent.__init__(
            self,
            spec=spec.ImageTrainerSpec(
                **{
                    spec.EXAMPLES_KEY: examples,
                    spec.IMAGE_STATISTICS_KEY: image_statistics,
                    spec.TRAIN_ARGS_KEY: trainer_pb2.TrainArgs(
                        splits=[train_split], num_steps=config.train_steps
                    ),
                    spec.EVAL_ARGS_KEY: trainer_pb2.EvalArgs(
                        splits=[eval_split], num_steps=config.eval_steps
                    ),
                    spec.EPOCHS_KEY: epochs,
                    spec.SPANS_KEY: spans,
                    spec.LAUNCHER_KEY: launcher,
                    spec.CHAMPION_KEY: champion,
                    spec.RUN_FN_KEY: run_fn,
                    spec.CUSTOM_CONFIG_KEY: json_utils.dumps(to_custom_config(config)),
                    spec.MODEL_KEY: types.Channel(type=standard_artifacts.Model),
                    spec.MODEL_RUN_KEY: types.Channel(type=standard_artifacts.ModelRun),
                }
            ),
        )
