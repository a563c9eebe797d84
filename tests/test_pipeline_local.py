"""The whole pipeline under LocalDagRunner through `imgpipe run local`, with no config:
the defaults learn, the served model is right on new images, and a second run on
unchanged images is served from TFX's cache."""

from __future__ import annotations

import os
import re

import pytest

from imgpipe.components.common import layout, served_models
from imgpipe.pipelines import cli, local_runner, sample_photos
from imgpipe.pipelines import component_ids as ids
from imgpipe.pipelines import config as cfg
from tests import imagegen, retraining_data


@pytest.mark.unit
def test_sample_photos_is_deterministic_real_photos(tmp_path):
    a = sample_photos.make_dataset(str(tmp_path / "a"), per_class=5, size=48)
    b = sample_photos.make_dataset(str(tmp_path / "b"), per_class=5, size=48)
    assert a == b == {name: 5 for name in sample_photos.CLASSES}
    for name in sample_photos.CLASSES:
        files = sorted(os.listdir(tmp_path / "a" / name))
        assert files == sorted(os.listdir(tmp_path / "b" / name))
        for file in files:
            assert (tmp_path / "a" / name / file).read_bytes() == (
                tmp_path / "b" / name / file
            ).read_bytes()
    # A second call with the same settings leaves the files (and their mtimes) alone.
    before = os.stat(tmp_path / "a" / "fruit" / files[0]).st_mtime_ns
    sample_photos.make_dataset(str(tmp_path / "a"), per_class=5, size=48)
    assert os.stat(tmp_path / "a" / "fruit" / files[0]).st_mtime_ns == before


@pytest.mark.pipeline
def test_run_local_with_defaults_learns_pushes_and_reruns_from_cache(tmp_path, capsys):
    data = retraining_data.span_folder(str(tmp_path / "images"), 1, per_class=200)
    serving = tmp_path / "serving"
    argv = ["run", "local", "--data", data, "--pipeline-root", str(tmp_path / "root")]
    argv += ["--serving-dir", str(serving)]

    assert cli.main(argv) == 0
    first = capsys.readouterr().out
    config = cfg.load(
        None, data_root=data, pipeline_root=str(tmp_path / "root"), serving_dir=str(serving)
    )
    result = local_runner.latest_results(config)
    assert set(result.nodes) == set(ids.COMPONENT_IDS)
    assert {n.state for n in result.nodes.values()} == {"COMPLETE"}
    champion = served_models.latest(str(serving))
    assert champion is not None and champion.labels == retraining_data.LABELS
    # The default model learned: right on images no split held, through the serving
    # signature on encoded bytes.
    assert retraining_data.served_accuracy(champion.path) > 0.9
    assert f"model (served)       {champion.path}" in first
    lines = {line[:21].strip(): line[21:] for line in first.splitlines() if line[:1].isalpha()}
    assert lines["training"].startswith("tiny_cnn at 128 px, weights none (from scratch)")
    assert lines["warm start"].startswith("off")
    assert lines["drift"].startswith("not checked: no model has been pushed to")
    assert lines["blessing"].startswith("blessed: accuracy")
    assert "no comparison (no complete push in" in lines["eval accuracy"]
    assert lines["data"] == f"{data} (span 0)"
    report = lines["image report"]
    assert report.endswith("report.html") and os.path.isfile(report)

    assert cli.main(argv) == 0
    second = capsys.readouterr().out
    assert local_runner.latest_results(config).all_cached
    assert "served from TFX's cache" in second
    assert served_models.latest(str(serving)) == champion


@pytest.mark.pipeline
def test_run_local_stops_on_data_anomalies_with_one_line_naming_the_report(tmp_path, capsys):
    data = tmp_path / "images"
    imagegen.make_image_folder(str(data / "train"), {"a": 4, "b": 4})
    imagegen.make_image_folder(str(data / "eval"), {"a": 2})  # no "b", and copies of train's
    config_file = tmp_path / "config.yaml"
    config_file.write_text(
        "pipeline_name: anomalies-test\n"
        "example_gen: {output: {num_shards: 1}}\n"
        "beam_args: [--direct_num_workers=1, --direct_running_mode=in_memory]\n"
    )
    argv = ["run", "local", "--data", str(data), "--config", str(config_file)]
    argv += ["--pipeline-root", str(tmp_path / "root")]

    assert cli.main(argv) == 1
    (line,) = capsys.readouterr().err.splitlines()
    report = re.fullmatch(
        r"imgpipe: error: ImageStatistics found 2 data anomalies \(labels_differ, leakage\), "
        r"so the run stopped before training; see (\S+), then fix the data or set "
        r"statistics.fail_on_anomalies: false in the pipeline config",
        line,
    ).group(1)
    assert os.path.isfile(report) and report.endswith(layout.REPORT_FILE)
