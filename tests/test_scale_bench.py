"""The scale benchmark's own parts: its synthetic data, its measurement of one run, and
the model it extrapolates with."""

from __future__ import annotations

import hashlib
import os
import tempfile

import pytest

from benchmarks import scale
from imgpipe.components.image_example_gen import listing

pytestmark = pytest.mark.component


def test_synthetic_dataset_is_distinct_listable_jpegs(tmp_path):
    folder = scale.make_synthetic_dataset(str(tmp_path / "data"), 40, classes=4)

    listed = listing.list_images(folder)
    assert len(listed.images) == 40 and not listed.skipped and not listed.ignored
    assert sorted(listed.labels) == [f"class_{k}" for k in range(4)]
    digests = {
        hashlib.sha256(open(os.path.join(folder, image.relpath), "rb").read()).digest()
        for image in listed.images
    }
    assert len(digests) == 40  # the conversion finds duplicates by content


def test_measure_reports_the_plan_the_shuffle_and_the_run(tmp_path, monkeypatch):
    temp = tmp_path / "temp"
    temp.mkdir()
    monkeypatch.setattr(tempfile, "tempdir", str(temp))
    small = scale.measure(
        scale.make_synthetic_dataset(str(tmp_path / "a"), 64), ["--direct_num_workers=1"]
    )
    large = scale.measure(
        scale.make_synthetic_dataset(str(tmp_path / "b"), 256), ["--direct_num_workers=1"]
    )

    assert (small["images"], large["images"]) == (64, 256)
    # The task files grow with the images; the pipeline handed to the runner does not.
    assert large["task_file_bytes"] > 3 * small["task_file_bytes"]
    assert abs(large["pipeline_proto_bytes"] - small["pipeline_proto_bytes"]) < 1024
    # Every GroupByKey's input is counted, and the pointers to records dominate.
    steps = large["shuffled_bytes"]["by_step"]
    assert {"AssignSplits/GroupByContent", "WriteShards/GroupByShard"} <= set(steps)
    assert large["shuffled_bytes"]["total"] > 3 * small["shuffled_bytes"]["total"]
    assert 0 < large["shuffled_bytes"]["total"] < large["source_bytes"] + 256 * 2000
    assert large["wall_s"] > 0 and large["listing_s"] > 0
    # Its plan and output are removed (Beam leaves empty folders of its own there).
    assert [name for name in os.listdir(temp) if name.startswith("imgpipe-")] == []


def test_fit_is_least_squares():
    assert scale.fit([(0, 1.0), (10, 21.0), (20, 41.0)]) == pytest.approx((1.0, 2.0))
    with pytest.raises(ValueError):
        scale.fit([(5, 1.0), (5, 2.0)])


def _run(images: int, wall_s: float, source_bytes: int, **extra) -> dict:
    return {
        "images": images,
        "wall_s": wall_s,
        "source_bytes": source_bytes,
        "listing_s": images * 1e-5,
        "task_file_bytes": images * 48,
        "pipeline_proto_bytes": 44_000,
        "shuffled_bytes": {"total": images * 500},
        "peak_worker_rss_mb": 900,
        **extra,
    }


def test_extrapolate_separates_fixed_per_image_per_byte_and_resize_costs():
    # fixed 1 s, 0.2 ms an image, 10 ms a MB, 1 ms a resize.
    mb = 2**20
    runs = {
        "synthetic": [_run(n, 1 + n * 2e-4, n * 800) for n in (3000, 30000, 300000)],
        "photos": _run(
            3000, 1 + 3000 * 2e-4 + (3000 * 40_000 - 3000 * 800) / mb * 0.01, 3000 * 40_000
        ),
    }
    runs["photos_resize"] = runs["photos"] | {"wall_s": runs["photos"]["wall_s"] + 3.0}
    model = scale.extrapolate(runs, cores=2, images=1_000_000)

    assert model["fixed_s"] == pytest.approx(1.0, abs=0.01)
    assert model["per_image_ms"] == pytest.approx(0.2, rel=0.01)
    assert model["per_mb_ms"] == pytest.approx(10, rel=0.01)
    assert model["resize_per_image_ms"] == pytest.approx(1.0, rel=0.01)
    imagenet = model["imagenet_1k"]
    assert imagenet["task_file_mb"] == pytest.approx(1e6 * 48 / mb, rel=0.01)
    assert imagenet["shuffled_mb"] == pytest.approx(1e6 * 500 / mb, rel=0.01)
    assert imagenet["pipeline_proto_kb"] == 43
    per_image_s = 2e-4 + scale.IMAGENET_BYTES / scale.IMAGENET_IMAGES / mb * 0.01
    passthrough = imagenet["passthrough"]
    assert passthrough["wall_s_here"] == pytest.approx(1 + 1e6 * per_image_s, rel=0.01)
    assert passthrough["2_core_workers_for_one_hour"] == -(-1e6 * per_image_s // 3599)
    assert imagenet["resize_256"]["wall_s_here"] == pytest.approx(
        1 + 1e6 * (per_image_s + 1e-3), rel=0.01
    )


def test_extrapolate_refuses_runs_whose_time_does_not_grow():
    runs = {
        "synthetic": [_run(3000, 240.0, 3000 * 800), _run(30000, 115.0, 30000 * 800)],
        "photos": _run(3000, 180.0, 3000 * 40_000),
        "photos_resize": _run(3000, 184.0, 3000 * 40_000),
    }
    assert "error" in scale.extrapolate(runs, cores=2)


def test_extrapolate_takes_the_photo_costs_at_the_margin_when_a_larger_photo_run_is_given():
    """Photo runs whose fixed cost is not the synthetic runs' (a minute more, as varied on
    Flink) still give the true per-byte and resize costs: from the larger run over the
    smaller one, in which that fixed cost cancels out."""
    mb = 2**20

    def wall(images: int, source_bytes: int, fixed: float, resize: bool = False) -> float:
        return fixed + images * 2e-4 + source_bytes / mb * 0.01 + (images * 1e-3 if resize else 0)

    # The synthetic images are tiny: their bytes cost nothing measurable.
    runs = {"synthetic": [_run(n, wall(n, 0, 60.0), n * 800) for n in (30000, 300000)]}
    for suffix, images in (("", 3000), ("_large", 30000)):
        source_bytes = images * 40_000
        runs["photos" + suffix] = _run(images, wall(images, source_bytes, 110.0), source_bytes)
        runs["photos_resize" + suffix] = _run(
            images, wall(images, source_bytes, 50.0, resize=True), source_bytes
        )
    model = scale.extrapolate(runs, cores=2, images=1_000_000)
    assert model["fixed_s"] == pytest.approx(60.0, abs=0.01)
    assert model["per_image_ms"] == pytest.approx(0.2, rel=0.01)
    assert model["per_mb_ms"] == pytest.approx(10, rel=0.01)
    assert model["resize_per_image_ms"] == pytest.approx(1.0, rel=0.01)

    # The same runs without the larger ones: the photo run's extra 50 s of fixed cost
    # lands in the per-byte cost (about 435 ms a MB instead of 10).
    del runs["photos_large"], runs["photos_resize_large"]
    assert scale.extrapolate(runs, cores=2, images=1_000_000)["per_mb_ms"] > 400
