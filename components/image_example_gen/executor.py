"""ImageExampleGen's executor: validates everything, then runs the shared conversion."""

from __future__ import annotations

import os
from typing import Any

from absl import logging
from tfx import types
from tfx.components.example_gen import utils as example_gen_utils
from tfx.components.util import examples_utils
from tfx.dsl.components.base import base_beam_executor
from tfx.proto import example_gen_pb2, range_config_pb2
from tfx.types import artifact_utils
from tfx.utils import proto_utils

from imgpipe.components.common.runtime import config_loader, progress
from imgpipe.components.common.runtime.printable import printable
from imgpipe.components.image_example_gen import data_warnings, spec
from imgpipe.components.image_example_gen import options as opts
from imgpipe.components.image_example_gen.convert import run_conversion
from imgpipe.components.image_example_gen.driver import ImageFolderInputProcessor, split_input_base

# TFX readers pick the codec from the file suffix; 'tfrecords_gzip' is the one TFRecord
# format name tfx-bsl accepts, and it reads plain shards (no .gz suffix) as plain.
_FILE_FORMAT = "tfrecords_gzip"


class Executor(base_beam_executor.BaseBeamExecutor):
    """Keys: parameters `input_base`, `input_config` and `range_config` (TFX's, with
    {SPAN}/{VERSION}), `image_options` and `output_options` (ImageOptions and
    OutputOptions JSON); output `examples` (Examples, with split_names and counts)."""

    def Do(  # noqa: N802 - TFX's executor interface
        self,
        input_dict: dict[str, list[types.Artifact]],
        output_dict: dict[str, list[types.Artifact]],
        exec_properties: dict[str, Any],
    ) -> None:
        del input_dict
        image_options = config_loader.from_json(
            opts.ImageOptions, exec_properties[spec.IMAGE_OPTIONS_KEY]
        )
        output_options = config_loader.from_json(
            opts.OutputOptions, exec_properties[spec.OUTPUT_OPTIONS_KEY]
        )
        examples = artifact_utils.get_single_instance(output_dict[spec.EXAMPLES_KEY])
        input_root = self._resolve_input_root(exec_properties, examples)
        logging.info("ImageExampleGen: %s -> %s", printable(input_root), examples.uri)

        result = run_conversion(
            input_root,
            examples.uri,
            image_options,
            output_options,
            make_pipeline=self._make_beam_pipeline,
            # `imgpipe run local`'s progress bar, on a terminal; None anywhere else.
            progress_dir=progress.folder_from_env(),
        )

        classes = sorted({label for s in result.summary.splits.values() for label in s.labels})
        if len(classes) < data_warnings.MIN_CLASSES:
            # A pipeline trains a classifier: stop here, not in the Trainer.
            raise ValueError(
                f"{printable(input_root)}: {data_warnings.too_few_classes_message(classes)}"
            )
        examples.split_names = artifact_utils.encode_split_names(result.split_names)
        examples_utils.set_payload_format(examples, example_gen_pb2.FORMAT_TF_EXAMPLE)
        examples_utils.set_file_format(examples, _FILE_FORMAT)
        summary = result.summary
        for key in ("written", "skipped", "ignored", "files_seen", "bytes_in", "bytes_out"):
            examples.set_int_custom_property(f"images_{key}", int(getattr(summary, key)))
        logging.info(
            "ImageExampleGen: %d written, %d skipped, %d ignored of %d files",
            summary.written,
            summary.skipped,
            summary.ignored,
            summary.files_seen,
        )
        for warning in summary.warnings:
            logging.warning("ImageExampleGen: %s", warning.message)

    @staticmethod
    def _resolve_input_root(exec_properties: dict[str, Any], examples: types.Artifact) -> str:
        """The image folder, with {SPAN}/{VERSION} resolved.

        Under LocalDagRunner the driver has resolved them already. Orchestrators that
        do not run TFX drivers (open-source KFP v2) leave them to the executor.
        """
        input_base = exec_properties[spec.INPUT_BASE_KEY]
        input_config = example_gen_pb2.Input()
        proto_utils.json_to_proto(exec_properties[spec.INPUT_CONFIG_KEY], input_config)
        if len(input_config.splits) != 1:
            raise ValueError(f"ImageExampleGen takes one input pattern, got {input_config}")
        pattern = input_config.splits[0].pattern
        if not pattern:  # the whole path was a runtime parameter: split it here
            input_base, pattern = split_input_base(input_base)
            input_config.splits[0].pattern = pattern
        if "{" in pattern:
            range_config = None
            if exec_properties.get(spec.RANGE_CONFIG_KEY):
                range_config = range_config_pb2.RangeConfig()
                proto_utils.json_to_proto(exec_properties[spec.RANGE_CONFIG_KEY], range_config)
            processor = ImageFolderInputProcessor(input_base, input_config.splits, range_config)
            span, version = processor.resolve_span_and_version()
            pattern = processor.get_pattern_for_span_version(pattern, span, version)
            examples.span = span
            if version is not None:
                examples.version = version
            examples.set_string_custom_property(
                example_gen_utils.FINGERPRINT_PROPERTY_NAME,
                processor.get_input_fingerprint(span, version),
            )
        return os.path.join(input_base, pattern)
