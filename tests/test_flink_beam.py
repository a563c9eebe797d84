"""The data steps on the Flink cluster give what the DirectRunner gives: `imgpipe convert`
at parallelism 2 writes byte-identical shards, `imgpipe stats` the same JSON."""

from __future__ import annotations

import os
import subprocess
import sys

import pytest

from imgpipe.pipelines.engines import flink
from tests import imagegen, outputs

pytestmark = pytest.mark.engine


@pytest.fixture(scope="module")
def cluster(tmp_path_factory):
    with flink.flink_cluster(str(tmp_path_factory.mktemp("flink"))) as running:
        yield running


def _imgpipe(*argv: str) -> None:
    result = subprocess.run(
        [sys.executable, "-m", "imgpipe.pipelines.cli", "--debug", *argv],
        capture_output=True,
        text=True,
    )
    assert result.returncode == 0, result.stderr[-3000:]


def test_convert_and_stats_on_flink_match_the_direct_runner(cluster, tmp_path):
    src = str(tmp_path / "src")
    imagegen.make_image_folder(src, {"cat": 6, "dog": 6})
    convert = ["convert", src, "--resize", "16", "--shards", "2", "--no-progress"]
    _imgpipe(*convert, str(tmp_path / "direct"))
    _imgpipe(*convert, str(tmp_path / "flink"), "--", *cluster.beam_args())

    direct, on_flink = outputs.tree(str(tmp_path / "direct")), outputs.tree(str(tmp_path / "flink"))
    assert sorted(on_flink) == sorted(direct)
    assert any(name.endswith(".tfrecord") or "-of-" in name for name in direct)
    assert on_flink == direct

    stats = ["stats", str(tmp_path / "direct")]
    _imgpipe(*stats, "--json", str(tmp_path / "direct.json"), "--html", str(tmp_path / "d.html"))
    _imgpipe(
        *stats,
        *("--json", str(tmp_path / "flink.json"), "--html", str(tmp_path / "f.html")),
        "--",
        *cluster.beam_args(),
    )
    assert (tmp_path / "flink.json").read_bytes() == (tmp_path / "direct.json").read_bytes()


def test_a_local_dag_runner_pipeline_runs_its_beam_steps_on_the_cluster(cluster, tmp_path):
    from tfx import v1 as tfx

    from imgpipe.components.image_example_gen.component import ImageExampleGen
    from imgpipe.components.image_example_gen.options import OutputOptions
    from imgpipe.components.image_statistics.component import ImageStatistics
    from imgpipe.components.image_statistics.config import StatisticsConfig
    from imgpipe.components.image_statistics.tfdv_options import image_stats_options

    images = str(tmp_path / "images")
    imagegen.make_image_folder(images, {"cat": 5, "dog": 5}, size=(20, 24))
    example_gen = ImageExampleGen(input_base=images, output_options=OutputOptions(num_shards=2))
    statistics_gen = tfx.components.StatisticsGen(
        examples=example_gen.outputs["examples"], stats_options=image_stats_options()
    )
    image_statistics = ImageStatistics(
        examples=example_gen.outputs["examples"],
        image_size=16,
        config=StatisticsConfig(sample_thumbnails=0),
    )
    finished_before = cluster.overview()["jobs-finished"]
    tfx.orchestration.LocalDagRunner().run(
        tfx.dsl.Pipeline(
            pipeline_name="on-flink",
            pipeline_root=str(tmp_path / "root"),
            components=[example_gen, statistics_gen, image_statistics],
            metadata_connection_config=tfx.orchestration.metadata.sqlite_metadata_connection_config(
                str(tmp_path / "metadata.db")
            ),
            beam_pipeline_args=cluster.beam_args(),
        )
    )
    overview = cluster.overview()
    # Each of the three components ran its Beam pipeline as a Flink job, and none failed.
    assert overview["jobs-finished"] - finished_before >= 3
    assert overview["jobs-failed"] == 0
    for component in ("ImageExampleGen", "StatisticsGen", "ImageStatistics"):
        assert os.listdir(tmp_path / "root" / component), component
