"""ImageTrainer: TFX's Trainer that also reads the ImageStatistics artifact."""

from __future__ import annotations

from typing import Any

from tfx import types
from tfx.components import Trainer
from tfx.dsl.components.base import base_component, executor_spec
from tfx.proto import trainer_pb2
from tfx.types import standard_artifacts
from tfx.utils import json_utils

from components.trainer import spec
from components.trainer.executor import Executor

DEFAULT_RUN_FN = "components.trainer.task.run_fn"


class ImageTrainer(Trainer):
    """Trains and exports the image classifier (components.trainer.task.run_fn).

    Outputs are TFX Trainer's: `model` (the SavedModel under Format-Serving, whose
    serving_default signature takes encoded image bytes) and `model_run` (TensorBoard
    logs, preemption backups).

    Example:
      ImageTrainer(examples=gen.outputs["examples"],
                   image_statistics=stats.outputs["statistics"],
                   train_args=trainer_pb2.TrainArgs(num_steps=1000),
                   eval_args=trainer_pb2.EvalArgs(num_steps=50),
                   custom_config={"backbone": "mobilenet_v3_small", "epochs": 10})
    """

    SPEC_CLASS = spec.ImageTrainerSpec
    EXECUTOR_SPEC = executor_spec.ExecutorClassSpec(Executor)

    def __init__(
        self,
        examples: types.BaseChannel,
        image_statistics: types.BaseChannel | None = None,
        run_fn: str = DEFAULT_RUN_FN,
        train_args: trainer_pb2.TrainArgs | None = None,
        eval_args: trainer_pb2.EvalArgs | None = None,
        custom_config: dict[str, Any] | None = None,
    ):
        """Args:
          examples: ImageExampleGen's `Examples` channel.
          image_statistics: the ImageStatistics channel (mean and std); optional only
            when custom_config sets mean and std.
          run_fn: dotted path of the training function.
          train_args: splits and num_steps (0: one pass over the data per epoch).
          eval_args: splits and num_steps (0: the whole eval split each epoch).
          custom_config: the keys of components.trainer.config.TrainerConfig, checked
            here so a typo fails at pipeline construction.
        """
        from components.trainer.config import TrainerConfig

        TrainerConfig.from_custom_config(custom_config)
        base_component.BaseComponent.__init__(self, spec=spec.ImageTrainerSpec(**{
            spec.EXAMPLES_KEY: examples,
            spec.IMAGE_STATISTICS_KEY: image_statistics,
            spec.TRAIN_ARGS_KEY: train_args or trainer_pb2.TrainArgs(),
            spec.EVAL_ARGS_KEY: eval_args or trainer_pb2.EvalArgs(),
            spec.RUN_FN_KEY: run_fn,
            spec.CUSTOM_CONFIG_KEY: json_utils.dumps(custom_config or {}),
            spec.MODEL_KEY: types.Channel(type=standard_artifacts.Model),
            spec.MODEL_RUN_KEY: types.Channel(type=standard_artifacts.ModelRun),
        }))
