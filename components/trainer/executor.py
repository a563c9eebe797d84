"""ImageTrainer's executor: TFX's GenericExecutor, passing the statistics URI to run_fn."""

from __future__ import annotations

from typing import Any

from tfx import types
from tfx.components.trainer import executor as trainer_executor
from tfx.components.trainer import fn_args_utils
from tfx.types import artifact_utils

from imgpipe.components.common.formats import champion
from imgpipe.components.common.storage import disk_full
from imgpipe.components.trainer import config as config_lib
from imgpipe.components.trainer import spec

SPAN = "span"


class Executor(trainer_executor.GenericExecutor):
    """TFX's Trainer keys plus the optional inputs `image_statistics` and `champion`,
    whose URIs run_fn gets as fn_args.custom_config["image_statistics_uri"] and
    ["champion_uri"], and the parameter `epochs` (overrides custom_config's). While it
    trains, the Trainer holds the run's serving lease (a failure gives it back)."""

    @disk_full.explained("Trainer", disk_full.first_output)
    def Do(  # noqa: N802 - TFX's executor interface
        self,
        input_dict: dict[str, list[types.Artifact]],
        output_dict: dict[str, list[types.Artifact]],
        exec_properties: dict[str, Any],
    ) -> None:
        resolved = champion.from_inputs(input_dict.get(spec.CHAMPION_KEY))
        with champion.holding(resolved):
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
        if exec_properties.get(spec.SPANS_KEY) is not None:
            custom_config["spans"] = int(exec_properties[spec.SPANS_KEY])
        examples = artifact_utils.get_single_instance(input_dict[spec.EXAMPLES_KEY])
        span = _span_of(examples)
        if span is not None:
            custom_config[config_lib.SPAN_KEY] = span
        if input_dict.get(spec.CHAMPION_KEY):
            uri = artifact_utils.get_single_uri(input_dict[spec.CHAMPION_KEY])
            custom_config[config_lib.CHAMPION_URI_KEY] = uri
        fn_args.custom_config = custom_config
        return fn_args


def _span_of(examples: types.Artifact) -> int | None:
    """The span TFX's ExampleGen driver recorded on the Examples (None when unset)."""
    if examples.has_custom_property(SPAN):
        return int(examples.get_int_custom_property(SPAN))
    if examples.has_property(SPAN):
        return int(examples.span)
    return None
