"""ImageTrainer's executor: TFX's GenericExecutor, passing the statistics URI to run_fn."""

from __future__ import annotations

from typing import Any

from tfx import types
from tfx.components.trainer import executor as trainer_executor
from tfx.components.trainer import fn_args_utils
from tfx.types import artifact_utils

from imgpipe.components.trainer.config import IMAGE_STATISTICS_URI_KEY
from imgpipe.components.trainer.spec import IMAGE_STATISTICS_KEY


class Executor(trainer_executor.GenericExecutor):
    """TFX's Trainer keys plus the optional input `image_statistics`, whose URI run_fn
    gets as fn_args.custom_config["image_statistics_uri"]."""

    def _GetFnArgs(  # noqa: N802 - TFX's executor interface
        self,
        input_dict: dict[str, list[types.Artifact]],
        output_dict: dict[str, list[types.Artifact]],
        exec_properties: dict[str, Any],
    ) -> fn_args_utils.FnArgs:
        fn_args = super()._GetFnArgs(input_dict, output_dict, exec_properties)
        if input_dict.get(IMAGE_STATISTICS_KEY):
            uri = artifact_utils.get_single_uri(input_dict[IMAGE_STATISTICS_KEY])
            fn_args.custom_config = {**(fn_args.custom_config or {}), IMAGE_STATISTICS_URI_KEY: uri}
        return fn_args
