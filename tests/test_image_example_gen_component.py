"""ImageExampleGen as a TFX component: TFX's own components consume its output, the
fingerprint drives caching, and {SPAN} patterns resolve on every orchestrator."""

from __future__ import annotations

import logging
import os

import pytest
import tensorflow as tf
from tensorflow_metadata.proto.v0 import schema_pb2
from tfx import v1 as tfx
from tfx.orchestration import metadata
from tfx.types import artifact_utils, standard_artifacts

from imgpipe.components.common.formats import features as fk
from imgpipe.components.image_example_gen import spec
from imgpipe.components.image_example_gen.component import ImageExampleGen
from imgpipe.components.image_example_gen.driver import split_input_base
from imgpipe.components.image_example_gen.executor import Executor
from imgpipe.components.image_example_gen.options import OutputOptions
from tests import imagegen

OUTPUT_OPTIONS = OutputOptions(
    num_shards=1, splits=(("train", 0.75), ("eval", 0.25)), stratify=True
)


def _pipeline(input_base: str, root: str) -> tfx.dsl.Pipeline:
    example_gen = ImageExampleGen(input_base=input_base, output_options=OUTPUT_OPTIONS)
    statistics_gen = tfx.components.StatisticsGen(examples=example_gen.outputs["examples"])
    schema_gen = tfx.components.SchemaGen(statistics=statistics_gen.outputs["statistics"])
    return tfx.dsl.Pipeline(
        pipeline_name="image-example-gen",
        pipeline_root=os.path.join(root, "pipeline_root"),
        components=[example_gen, statistics_gen, schema_gen],
        enable_cache=True,
        metadata_connection_config=tfx.orchestration.metadata.sqlite_metadata_connection_config(
            os.path.join(root, "metadata.db")
        ),
        beam_pipeline_args=["--direct_num_workers=1"],
    )


def _outputs(root: str, component: str, key: str) -> list[str]:
    return sorted(tf.io.gfile.glob(os.path.join(root, "pipeline_root", component, key, "*")))


@pytest.mark.pipeline
def test_tfx_statistics_and_schema_consume_the_output_and_new_images_rerun(tmp_path):
    images = str(tmp_path / "images")
    imagegen.make_image_folder(images, {"cat": 6, "dog": 6})
    root = str(tmp_path / "run")

    tfx.orchestration.LocalDagRunner().run(_pipeline(images, root))

    (examples_dir,) = _outputs(root, "ImageExampleGen", "examples")
    assert {n.rstrip("/") for n in tf.io.gfile.listdir(examples_dir)} == {
        "Split-train",
        "Split-eval",
        "conversion_summary.json",
        "ignored.json",
        "label_map.json",
        "labels.txt",
        "manifest.json",
        "skipped.json",
        "dali_index",
    }
    # DALI's index files sit outside Split-<name>/, whose every file TFX reads as a shard.
    for split in ("train", "eval"):
        shard_names = tf.io.gfile.listdir(os.path.join(examples_dir, f"Split-{split}"))
        assert sorted(
            tf.io.gfile.listdir(os.path.join(examples_dir, f"dali_index/Split-{split}"))
        ) == [name + ".idx" for name in sorted(shard_names)]
    (stats_dir,) = _outputs(root, "StatisticsGen", "statistics")
    assert {"Split-train", "Split-eval"} <= {n.rstrip("/") for n in tf.io.gfile.listdir(stats_dir)}
    (schema_dir,) = _outputs(root, "SchemaGen", "schema")
    schema = tfx.utils.parse_pbtxt_file(
        os.path.join(schema_dir, "schema.pbtxt"), schema_pb2.Schema()
    )
    types = {f.name: f.type for f in schema.feature}
    assert types[fk.IMAGE_ENCODED_KEY] == schema_pb2.BYTES
    assert types[fk.LABEL_KEY] == schema_pb2.INT
    assert types[fk.IMAGE_HEIGHT_KEY] == schema_pb2.INT

    # Unchanged images: served from cache, no new Examples artifact.
    tfx.orchestration.LocalDagRunner().run(_pipeline(images, root))
    assert len(_outputs(root, "ImageExampleGen", "examples")) == 1

    # A new image changes the fingerprint, so the component runs again.
    imagegen.write(
        os.path.join(images, "dog", "new", "extra.jpg"),
        imagegen.jpeg_bytes(imagegen.photo_like(20, 20, seed=5)),
    )
    tfx.orchestration.LocalDagRunner().run(_pipeline(images, root))
    assert len(_outputs(root, "ImageExampleGen", "examples")) == 2


@pytest.mark.component
def test_executor_resolves_the_latest_span_when_no_driver_ran(tmp_path):
    for span in (1, 2):
        imagegen.make_image_folder(
            str(tmp_path / "data" / f"span-{span}"), {"a": 2 + span, "b": 2}, seed=span
        )
    examples = run_without_driver(tmp_path, "span-{SPAN}")

    assert examples.span == 2
    assert artifact_utils.decode_split_names(examples.split_names) == ["train", "eval"]
    assert examples.get_int_custom_property("images_written") == 6
    assert "num_files:6" in examples.get_string_custom_property("input_fingerprint")
    assert examples.get_string_custom_property("payload_format") == "FORMAT_TF_EXAMPLE"


def run_without_driver(tmp_path, pattern: str) -> standard_artifacts.Examples:
    """The executor on tmp_path/data/<pattern> with no driver before it (Kubeflow's way)."""
    component = ImageExampleGen(
        input_base=str(tmp_path / "data" / pattern), output_options=OUTPUT_OPTIONS
    )
    examples = standard_artifacts.Examples()
    examples.uri = str(tmp_path / "out")
    exec_properties = dict(component.exec_properties)
    exec_properties["beam_pipeline_args"] = ["--direct_num_workers=1"]
    Executor().Do({}, {spec.EXAMPLES_KEY: [examples]}, exec_properties)
    return examples


def _span_folders(data) -> None:
    """data/span-5, data/span-007 (the latest, of 5 images), a stray folder and a file."""
    imagegen.make_image_folder(str(data / "span-5"), {"a": 2, "b": 2}, seed=5)
    imagegen.make_image_folder(str(data / "span-007"), {"a": 3, "b": 2}, seed=7)
    os.makedirs(data / "span-x")
    (data / "notes.txt").write_text("where the spans come from")


@pytest.mark.pipeline
def test_the_driver_reads_a_zero_padded_span_and_ignores_a_stray_folder(tmp_path, caplog):
    """TFX's driver, under LocalDagRunner: span-007 is span 7, read from span-007 (TFX's
    own resolution failed on span-x, and rebuilt the folder as span-7)."""
    _span_folders(tmp_path / "data")
    example_gen = ImageExampleGen(
        input_base=str(tmp_path / "data" / "span-{SPAN}"), output_options=OUTPUT_OPTIONS
    )
    root = str(tmp_path / "run")
    pipeline = tfx.dsl.Pipeline(
        pipeline_name="span-folders",
        pipeline_root=os.path.join(root, "pipeline_root"),
        components=[example_gen],
        metadata_connection_config=tfx.orchestration.metadata.sqlite_metadata_connection_config(
            os.path.join(root, "metadata.db")
        ),
        beam_pipeline_args=["--direct_num_workers=1"],
    )

    with caplog.at_level(logging.WARNING):
        tfx.orchestration.LocalDagRunner().run(pipeline)

    with metadata.Metadata(pipeline.metadata_connection_config) as store:
        (examples,) = store.store.get_artifacts_by_type(standard_artifacts.Examples.TYPE_NAME)
    assert examples.custom_properties["span"].int_value == 7
    assert examples.custom_properties["images_written"].int_value == 5
    fingerprint = examples.custom_properties["input_fingerprint"].string_value
    assert fingerprint.startswith(f"images:{tmp_path}/data/span-007,num_files:5,"), fingerprint
    assert (
        f"ImageExampleGen: ignored in {tmp_path}/data: notes.txt and span-x (not named as "
        "span-{SPAN} says); span 7 is read, from span-007"
    ) in caplog.messages


@pytest.mark.component
def test_the_executor_reads_a_zero_padded_span_when_no_driver_ran(tmp_path):
    _span_folders(tmp_path / "data")
    examples = run_without_driver(tmp_path, "span-{SPAN:3}")

    assert examples.span == 7
    assert examples.get_int_custom_property("images_written") == 5


@pytest.mark.unit
def test_input_base_is_split_into_base_and_pattern():
    assert split_input_base("/data/flowers") == ("/data", "flowers")
    assert split_input_base("gs://b/imgs/span-{SPAN}/v{VERSION}/") == (
        "gs://b/imgs",
        "span-{SPAN}/v{VERSION}",
    )


@pytest.mark.component
def test_the_executor_stops_a_pipeline_on_a_dataset_of_one_class(tmp_path):
    """The first step says so, naming the fix, rather than the Trainer 48 s later."""
    imagegen.make_image_folder(str(tmp_path / "data"), {"cat": 4})
    component = ImageExampleGen(input_base=str(tmp_path / "data"), output_options=OUTPUT_OPTIONS)
    examples = standard_artifacts.Examples()
    examples.uri = str(tmp_path / "out")
    exec_properties = dict(component.exec_properties)
    exec_properties["beam_pipeline_args"] = ["--direct_num_workers=1"]

    with pytest.raises(ValueError) as raised:
        Executor().Do({}, {spec.EXAMPLES_KEY: [examples]}, exec_properties)

    assert str(raised.value) == (
        f"{tmp_path}/data: the dataset has 1 class with images ('cat'), and a classifier "
        "needs at least 2: add a folder <label>/ of images for each other class"
    )
