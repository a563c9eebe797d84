"""ImageExampleGen's component spec: parameter and channel names, spelled once."""

from __future__ import annotations

from tfx.types import component_spec, standard_artifacts, standard_component_specs

# The driver (tfx.components.example_gen.driver) reads these two by TFX's own names.
INPUT_BASE_KEY = standard_component_specs.INPUT_BASE_KEY
INPUT_CONFIG_KEY = standard_component_specs.INPUT_CONFIG_KEY
RANGE_CONFIG_KEY = standard_component_specs.RANGE_CONFIG_KEY
IMAGE_OPTIONS_KEY = "image_options"
OUTPUT_OPTIONS_KEY = "output_options"
EXAMPLES_KEY = standard_component_specs.EXAMPLES_KEY

# The name of the single input "split" the driver resolves {SPAN}/{VERSION} in.
IMAGES_INPUT_SPLIT = "images"


class ImageExampleGenSpec(component_spec.ComponentSpec):
    """ImageExampleGen: an image folder in, an `Examples` artifact out."""

    PARAMETERS = {
        INPUT_BASE_KEY: component_spec.ExecutionParameter(type=str),
        INPUT_CONFIG_KEY: component_spec.ExecutionParameter(type=str),
        RANGE_CONFIG_KEY: component_spec.ExecutionParameter(type=str, optional=True),
        IMAGE_OPTIONS_KEY: component_spec.ExecutionParameter(type=str),
        OUTPUT_OPTIONS_KEY: component_spec.ExecutionParameter(type=str),
    }
    INPUTS: dict[str, component_spec.ChannelParameter] = {}
    OUTPUTS = {
        EXAMPLES_KEY: component_spec.ChannelParameter(type=standard_artifacts.Examples),
    }
