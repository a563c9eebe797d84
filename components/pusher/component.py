"""ImagePusher: TFX's Pusher component with the whole-push executor."""

from __future__ import annotations

from tfx.components import Pusher
from tfx.dsl.components.base import executor_spec

from imgpipe.components.pusher.executor import Executor


class ImagePusher(Pusher):
    """TFX's Pusher (same spec, same outputs) whose pushes are atomic and marked complete.

    Example:
      ImagePusher(model=trainer.outputs["model"],
                  model_blessing=evaluator.outputs["blessing"],
                  push_destination=pusher_pb2.PushDestination(
                      filesystem=pusher_pb2.PushDestination.Filesystem(
                          base_directory="/srv/models")))
    """

    EXECUTOR_SPEC = executor_spec.ExecutorClassSpec(Executor)
