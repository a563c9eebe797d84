"""ImageStatistics in a LocalDagRunner run beside StatisticsGen -> SchemaGen ->
ExampleValidator: the gate stops the run on a planted leak, after writing its outputs,
and TFDV's semantic domain statistics type the image bytes as an image."""

from __future__ import annotations

import json
import os
import shutil

import pytest
import tensorflow as tf
from tensorflow_metadata.proto.v0 import schema_pb2
from tfx import v1 as tfx

from imgpipe.components.common.formats import features as fk
from imgpipe.components.common.formats import image_stats, layout
from imgpipe.components.image_example_gen.component import ImageExampleGen
from imgpipe.components.image_example_gen.options import OutputOptions
from imgpipe.components.image_statistics import anomalies as anomaly_lib
from imgpipe.components.image_statistics import spec
from imgpipe.components.image_statistics.component import ImageStatistics
from imgpipe.components.image_statistics.config import StatisticsConfig
from imgpipe.components.image_statistics.tfdv_options import image_stats_options
from tests import imagegen

pytestmark = pytest.mark.pipeline

# TFDV marks an image domain only from 100 values on (ImageStatsGenerator).
TRAIN_PER_LABEL = 55
EVAL_PER_LABEL = 8


def _image_folder(root: str) -> None:
    seed = 0
    for split, count in (("train", TRAIN_PER_LABEL), ("eval", EVAL_PER_LABEL)):
        for label in ("ant", "bee"):
            for i in range(count):
                seed += 1
                imagegen.write(
                    os.path.join(root, split, label, f"{i:03d}.png"),
                    imagegen.png_bytes(imagegen.photo_like(20, 24, seed=seed)),
                )
    shutil.copy(
        os.path.join(root, "train", "ant", "007.png"),
        os.path.join(root, "eval", "ant", "planted.png"),
    )


def _pipeline(images: str, root: str) -> tfx.dsl.Pipeline:
    example_gen = ImageExampleGen(input_base=images, output_options=OutputOptions(num_shards=1))
    statistics_gen = tfx.components.StatisticsGen(
        examples=example_gen.outputs["examples"], stats_options=image_stats_options()
    )
    schema_gen = tfx.components.SchemaGen(statistics=statistics_gen.outputs["statistics"])
    validator = tfx.components.ExampleValidator(
        statistics=statistics_gen.outputs["statistics"], schema=schema_gen.outputs["schema"]
    )
    stats = ImageStatistics(
        examples=example_gen.outputs["examples"],
        image_size=32,
        anomalies=validator.outputs["anomalies"],
        config=StatisticsConfig(sample_thumbnails=2),
    )
    return tfx.dsl.Pipeline(
        pipeline_name="image-statistics",
        pipeline_root=os.path.join(root, "pipeline_root"),
        components=[example_gen, statistics_gen, schema_gen, validator, stats],
        metadata_connection_config=tfx.orchestration.metadata.sqlite_metadata_connection_config(
            os.path.join(root, "metadata.db")
        ),
        beam_pipeline_args=["--direct_num_workers=1"],
    )


def _outputs(root: str, component: str, key: str) -> list[str]:
    return sorted(tf.io.gfile.glob(os.path.join(root, "pipeline_root", component, key, "*")))


def test_gate_stops_the_run_on_leakage_after_writing_the_report(tmp_path):
    images, root = str(tmp_path / "images"), str(tmp_path / "run")
    _image_folder(images)

    with pytest.raises(Exception) as raised:
        tfx.orchestration.LocalDagRunner().run(_pipeline(images, root))
    message = "".join(str(e) for e in (raised.value, raised.value.__cause__) if e)
    assert anomaly_lib.AnomaliesFoundError.__name__ in repr(raised.value) or (
        "fail_on_anomalies" in message
    )
    assert "leakage" in message and "eval/ant/planted.png" in message

    # TFX removed the failed execution's output folder; the gate kept a copy beside it.
    (stats_dir,) = _outputs(root, "ImageStatistics", spec.STATISTICS_KEY)
    assert stats_dir.endswith(layout.REJECTED_SUFFIX) and stats_dir in message
    with open(os.path.join(stats_dir, layout.IMAGE_STATS_FILE)) as f:
        stats = json.load(f)
    assert stats["leakage"]["images_by_split"]["eval"] == 1
    assert stats["splits"]["train"]["images"] == 2 * TRAIN_PER_LABEL
    assert os.path.getsize(os.path.join(stats_dir, layout.REPORT_FILE)) > 5_000
    assert image_stats.read(stats_dir).normalization().image_size == 32

    (schema_dir,) = _outputs(root, "SchemaGen", "schema")
    schema = tfx.utils.parse_pbtxt_file(
        os.path.join(schema_dir, "schema.pbtxt"), schema_pb2.Schema()
    )
    encoded = next(f for f in schema.feature if f.name == fk.IMAGE_ENCODED_KEY)
    assert encoded.WhichOneof("domain_info") == "image_domain"
    # The other bytes features stay plain strings.
    filename = next(f for f in schema.feature if f.name == fk.FILENAME_KEY)
    assert filename.WhichOneof("domain_info") != "image_domain"
