"""ImageEvaluator's executor: TFX's Evaluator, once its inputs are known to be complete.

The stock Evaluator reads the Examples through its own tfxio and the model through
TFMA; neither knows this project's manifests. So the manifests of the Examples and of
the model are verified here first: an output that a killed or retried step left
incomplete fails here, with the file named, instead of being evaluated.
"""

from __future__ import annotations

from typing import Any

from tfx import types
from tfx.components.evaluator import executor as evaluator_executor
from tfx.types import standard_component_specs

from imgpipe.components.common import manifest

# The inputs this project writes. A baseline model may come from a release that wrote
# no manifest, so it is read as TFX reads it.
VERIFIED_INPUTS = (standard_component_specs.EXAMPLES_KEY, standard_component_specs.MODEL_KEY)


class Executor(evaluator_executor.Executor):
    """TFX's Evaluator executor and keys; refuses incomplete `examples` and `model`."""

    def Do(  # noqa: N802 - TFX's executor interface
        self,
        input_dict: dict[str, list[types.Artifact]],
        output_dict: dict[str, list[types.Artifact]],
        exec_properties: dict[str, Any],
    ) -> None:
        for key in VERIFIED_INPUTS:
            for artifact in input_dict.get(key, []):
                manifest.verify(artifact.uri)
        super().Do(input_dict, output_dict, exec_properties)
