"""ImageTrainer's executor: TFX's GenericExecutor, passing the statistics URI to run_fn."""

from __future__ import annotations

from typing import Any

from tfx import types
from tfx.components.trainer import executor as trainer_executor
from tfx.components.trainer import fn_args_utils
from tfx.types import artifact_utils

from imgpipe.components.common.storage import disk_full
from imgpipe.components.trainer import config as config_lib
from imgpipe.components.trainer import spec


class Executor(trainer_executor.GenericExecutor):
    """TFX's Trainer keys plus the optional input `image_statistics`, whose URI run_fn
    gets as fn_args.custom_config["image_statistics_uri"], and the parameters `epochs`
    (overrides custom_config's) and `serving_dir` (custom_config["serving_dir"])."""

    @disk_full.explained("Trainer", disk_full.first_output)
    def Do(  # noqa: N802 - TFX's executor interface
        self,
        input_dict: dict[str, list[types.Artifact]],
        output_dict: dict[str, list[types.Artifact]],
        exec_properties: dict[str, Any],
    ) -> None:
        super().Do(input_dict, output_dict, exec_properties)

    def _GetFnArgs(  # noqa: N802 - TFX's executor interface
        self,
        input_dict: dict[str, list[types.Artifact]],
        output_dict: dict[str, list[types.Artifact]],
        exec_properties: dict[str, Any],
    ) -> fn_args_utils.FnArgs:
        fn_args = super()._GetFnArgs(input_dict, output_dict, exec_properties)
        custom_config = dict(fn_args.custom_config or {})
        if input_dict.get(spec.IMAGE_STATISTICS_KEY):
            uri = artifact_utils.get_single_uri(input_dict[spec.IMAGE_STATISTICS_KEY])
            custom_config[config_lib.IMAGE_STATISTICS_URI_KEY] = uri
        if exec_properties.get(spec.EPOCHS_KEY):
            custom_config["epochs"] = int(exec_properties[spec.EPOCHS_KEY])
        if exec_properties.get(spec.SERVING_DIR_KEY):
            custom_config[config_lib.SERVING_DIR_KEY] = exec_properties[spec.SERVING_DIR_KEY]
        fn_args.custom_config = custom_config
        return fn_args
