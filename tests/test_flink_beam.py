"""The data steps on the Flink cluster give what the DirectRunner gives: `imgpipe convert`
at parallelism 2 writes byte-identical shards, `imgpipe stats` the same JSON."""

from __future__ import annotations

import os
import subprocess
import sys

import pytest

from imgpipe.pipelines.engines import flink
from tests import imagegen

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


def _files(root: str) -> dict[str, bytes]:
    found = {}
    for folder, _, names in os.walk(root):
        for name in names:
            path = os.path.join(folder, name)
            with open(path, "rb") as f:
                found[os.path.relpath(path, root)] = f.read()
    return found


def test_convert_and_stats_on_flink_match_the_direct_runner(cluster, tmp_path):
    src = str(tmp_path / "src")
    imagegen.make_image_folder(src, {"cat": 6, "dog": 6})
    convert = ["convert", src, "--resize", "16", "--shards", "2", "--no-progress"]
    _imgpipe(*convert, str(tmp_path / "direct"))
    _imgpipe(*convert, str(tmp_path / "flink"), "--", *cluster.beam_args())

    direct, on_flink = _files(str(tmp_path / "direct")), _files(str(tmp_path / "flink"))
    assert sorted(on_flink) == sorted(direct)
    assert any(name.endswith(".tfrecord") or "-of-" in name for name in direct)
    assert on_flink == direct

    stats = ["stats", str(tmp_path / "direct")]
    _imgpipe(*stats, "--json", str(tmp_path / "direct.json"))
    _imgpipe(*stats, "--json", str(tmp_path / "flink.json"), "--", *cluster.beam_args())
    assert (tmp_path / "flink.json").read_bytes() == (tmp_path / "direct.json").read_bytes()
