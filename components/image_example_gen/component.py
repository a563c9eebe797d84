"""ImageExampleGen: a folder of labelled images to an `Examples` artifact of TFRecords."""

from __future__ import annotations

from tfx.dsl.components.base import base_beam_component, executor_spec
from tfx.orchestration import data_types
from tfx.proto import example_gen_pb2, range_config_pb2
from tfx.utils import proto_utils

from imgpipe.components.common.runtime import config_loader
from imgpipe.components.image_example_gen import options as opts
from imgpipe.components.image_example_gen import spec
from imgpipe.components.image_example_gen.driver import ImageFolderDriver, split_input_base
from imgpipe.components.image_example_gen.executor import Executor


class ImageExampleGen(base_beam_component.BaseBeamComponent):
    """Converts root/<label>/... or root/<split>/<label>/... into sharded TFRecords.

    The output is a standard `Examples` artifact (Split-<name>/ folders, split_names,
    tf.Example payload) that StatisticsGen, SchemaGen, ExampleValidator, Transform and
    Trainer read unchanged. Beside the splits it holds label_map.json, labels.txt,
    skipped.json, ignored.json and conversion_summary.json.

    Example:
      ImageExampleGen(input_base="gs://bucket/flowers/span-{SPAN}",
                      image_options=ImageOptions(resize=256, center_crop=True))
    """

    SPEC_CLASS = spec.ImageExampleGenSpec
    EXECUTOR_SPEC = executor_spec.BeamExecutorSpec(Executor)
    DRIVER_CLASS = ImageFolderDriver

    def __init__(
        self,
        input_base: str | data_types.RuntimeParameter,
        image_options: opts.ImageOptions | None = None,
        output_options: opts.OutputOptions | None = None,
        range_config: range_config_pb2.RangeConfig | None = None,
    ):
        """Args:
        input_base: the image folder; may hold TFX's {SPAN} and {VERSION} patterns. A
          RuntimeParameter (Kubeflow) is split into base and pattern by the executor.
        image_options: what is done to each image (default: bytes kept).
        output_options: layout, splits, shards and error policy.
        range_config: which spans to take, as for FileBasedExampleGen.
        """
        image_options = image_options or opts.ImageOptions()
        output_options = output_options or opts.OutputOptions()
        if isinstance(input_base, data_types.RuntimeParameter):
            base: str | data_types.RuntimeParameter = input_base
            pattern = ""
        else:
            base, pattern = split_input_base(input_base)
        input_config = example_gen_pb2.Input(
            splits=[example_gen_pb2.Input.Split(name=spec.IMAGES_INPUT_SPLIT, pattern=pattern)]
        )
        from tfx import types

        super().__init__(
            spec=spec.ImageExampleGenSpec(
                **{
                    spec.INPUT_BASE_KEY: base,
                    spec.INPUT_CONFIG_KEY: proto_utils.proto_to_json(input_config),
                    spec.RANGE_CONFIG_KEY: (
                        proto_utils.proto_to_json(range_config) if range_config else None
                    ),
                    spec.IMAGE_OPTIONS_KEY: config_loader.to_json(image_options),
                    spec.OUTPUT_OPTIONS_KEY: config_loader.to_json(output_options),
                    spec.EXAMPLES_KEY: types.Channel(type=types.standard_artifacts.Examples),
                }
            )
        )
