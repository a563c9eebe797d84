"""ImageTrainer's executor: TFX's GenericExecutor, passing its inputs' URIs to run_fn
through the public custom_config property."""

from __future__ import annotations

from typing import Any

from tfx import types
from tfx.components.trainer import executor as trainer_executor
from tfx.types import artifact_utils
from tfx.utils import json_utils

from imgpipe.components.common.formats import champion
from imgpipe.components.common.formats.artifact_types import (
    ADMITTED_BY_ACCEPTANCE_PROPERTY,
    span_of,
)
from imgpipe.components.common.storage import disk_full
from imgpipe.components.trainer import config as config_lib
from imgpipe.components.trainer import spec


class Executor(trainer_executor.GenericExecutor):
    """TFX's Trainer keys plus the optional inputs `image_statistics` and `champion`,
    whose URIs run_fn gets as fn_args.custom_config["image_statistics_uri"] and
    ["champion_uri"], the Examples' span as ["span"], and the parameters `epochs`,
    `spans` and `launcher` (override custom_config's). While it trains, the Trainer holds the run's
    serving lease (a failure gives it back)."""

    @disk_full.explained("Trainer", disk_full.first_output)
    def Do(  # noqa: N802 - TFX's executor interface
        self,
        input_dict: dict[str, list[types.Artifact]],
        output_dict: dict[str, list[types.Artifact]],
        exec_properties: dict[str, Any],
    ) -> None:
        resolved = champion.from_inputs(input_dict.get(spec.CHAMPION_KEY))
        # TFX hands run_fn the custom_config property as fn_args.custom_config: what run_fn
        # needs from the inputs and parameters goes in there.
        properties = dict(exec_properties)
        properties[spec.CUSTOM_CONFIG_KEY] = json_utils.dumps(
            {
                **(json_utils.loads(exec_properties.get(spec.CUSTOM_CONFIG_KEY) or "null") or {}),
                **run_fn_settings(input_dict, exec_properties),
            }
        )
        with champion.holding(resolved):
            super().Do(input_dict, output_dict, properties)


def run_fn_settings(
    input_dict: dict[str, list[types.Artifact]], exec_properties: dict[str, Any]
) -> dict[str, Any]:
    """The custom_config entries the executor adds for run_fn (config.EXECUTOR_KEYS, and
    the parameters that override the config's)."""
    settings: dict[str, Any] = {}
    if input_dict.get(spec.IMAGE_STATISTICS_KEY):
        statistics = artifact_utils.get_single_instance(input_dict[spec.IMAGE_STATISTICS_KEY])
        settings[config_lib.IMAGE_STATISTICS_URI_KEY] = statistics.uri
        if statistics.has_custom_property(ADMITTED_BY_ACCEPTANCE_PROPERTY):
            accepted = statistics.get_int_custom_property(ADMITTED_BY_ACCEPTANCE_PROPERTY)
            settings[config_lib.SPAN_ACCEPTED_KEY] = bool(accepted)
    if input_dict.get(spec.CHAMPION_KEY):
        settings[config_lib.CHAMPION_URI_KEY] = artifact_utils.get_single_uri(
            input_dict[spec.CHAMPION_KEY]
        )
    if exec_properties.get(spec.EPOCHS_KEY):
        settings["epochs"] = int(exec_properties[spec.EPOCHS_KEY])
    if exec_properties.get(spec.SPANS_KEY) is not None:
        settings["spans"] = int(exec_properties[spec.SPANS_KEY])
    if exec_properties.get(spec.LAUNCHER_KEY):
        settings["launcher"] = config_lib.checked_launcher(str(exec_properties[spec.LAUNCHER_KEY]))
    span = span_of(artifact_utils.get_single_instance(input_dict[spec.EXAMPLES_KEY]))
    if span is not None:
        settings[config_lib.SPAN_KEY] = span
    return settings
