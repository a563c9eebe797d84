"""Proves the pinned stack: TFX's own components on LocalDagRunner, and a Kubeflow v2 compile."""

from __future__ import annotations

import os

import cv2
import numpy as np
import pytest
import tensorflow as tf
import yaml
from tensorflow_metadata.proto.v0 import schema_pb2
from tfx import v1 as tfx
from tfx.orchestration.kubeflow.v2 import kubeflow_v2_dag_runner

from imgpipe.components.common.formats import features as fk


def _write_jpeg_examples(path: str, count: int) -> None:
    rng = np.random.default_rng(0)
    with tf.io.TFRecordWriter(path) as writer:
        for i in range(count):
            pixels = rng.integers(0, 256, (16, 24, 3), dtype=np.uint8)
            ok, jpeg = cv2.imencode(".jpg", pixels)
            assert ok
            example = tf.train.Example(
                features=tf.train.Features(
                    feature={
                        fk.IMAGE_ENCODED_KEY: tf.train.Feature(
                            bytes_list=tf.train.BytesList(value=[jpeg.tobytes()])
                        ),
                        fk.LABEL_KEY: tf.train.Feature(
                            int64_list=tf.train.Int64List(value=[i % 2])
                        ),
                        fk.IMAGE_HEIGHT_KEY: tf.train.Feature(
                            int64_list=tf.train.Int64List(value=[16])
                        ),
                    }
                )
            )
            writer.write(example.SerializeToString())


def _stack_pipeline(data_dir: str, root: str) -> tfx.dsl.Pipeline:
    example_gen = tfx.components.ImportExampleGen(input_base=data_dir)
    statistics_gen = tfx.components.StatisticsGen(examples=example_gen.outputs["examples"])
    schema_gen = tfx.components.SchemaGen(statistics=statistics_gen.outputs["statistics"])
    return tfx.dsl.Pipeline(
        pipeline_name="stack-proof",
        pipeline_root=os.path.join(root, "pipeline_root"),
        components=[example_gen, statistics_gen, schema_gen],
        metadata_connection_config=tfx.orchestration.metadata.sqlite_metadata_connection_config(
            os.path.join(root, "metadata.db")
        ),
        beam_pipeline_args=["--direct_num_workers=1"],
    )


@pytest.mark.pipeline
def test_local_dag_runner_infers_schema_of_jpeg_examples(tmp_path):
    data_dir = tmp_path / "data"
    data_dir.mkdir()
    _write_jpeg_examples(str(data_dir / "images.tfrecord"), count=20)

    tfx.orchestration.LocalDagRunner().run(_stack_pipeline(str(data_dir), str(tmp_path)))

    schema_dirs = tf.io.gfile.glob(str(tmp_path / "pipeline_root" / "SchemaGen" / "schema" / "*"))
    assert len(schema_dirs) == 1
    schema = tfx.utils.parse_pbtxt_file(
        os.path.join(schema_dirs[0], "schema.pbtxt"), schema_pb2.Schema()
    )
    features = {f.name: f for f in schema.feature}
    assert set(features) == {fk.IMAGE_ENCODED_KEY, fk.LABEL_KEY, fk.IMAGE_HEIGHT_KEY}
    assert features[fk.IMAGE_ENCODED_KEY].type == schema_pb2.BYTES
    assert features[fk.LABEL_KEY].type == schema_pb2.INT
    examples_dirs = tf.io.gfile.glob(
        str(tmp_path / "pipeline_root" / "ImportExampleGen" / "examples" / "*")
    )
    assert len(examples_dirs) == 1
    assert tf.io.gfile.exists(os.path.join(examples_dirs[0], "Split-train"))
    assert tf.io.gfile.exists(os.path.join(examples_dirs[0], "Split-eval"))


@pytest.mark.component
def test_kubeflow_v2_runner_compiles_the_same_pipeline_to_yaml(tmp_path):
    data_dir = tmp_path / "data"
    data_dir.mkdir()
    output = tmp_path / "pipeline.yaml"
    runner = kubeflow_v2_dag_runner.KubeflowV2DagRunner(
        config=kubeflow_v2_dag_runner.KubeflowV2DagRunnerConfig(default_image="imgpipe:test"),
        output_filename=str(output),
    )
    runner.run(_stack_pipeline(str(data_dir), str(tmp_path)))

    spec = yaml.safe_load(output.read_text())
    assert spec["pipelineInfo"]["name"] == "stack-proof"
    tasks = spec["root"]["dag"]["tasks"]
    assert set(tasks) == {"ImportExampleGen", "StatisticsGen", "SchemaGen"}
    assert tasks["SchemaGen"]["dependentTasks"] == ["StatisticsGen"]
    executors = spec["deploymentSpec"]["executors"]
    assert all(e["container"]["image"] == "imgpipe:test" for e in executors.values())
