"""The whole pipeline under LocalDagRunner through `imgpipe run local`, with no config:
the defaults learn, the served model is right on new images, and a second run on
unchanged images is served from TFX's cache. And a pre-split folder that the data gate
stops, until its advice is followed."""

from __future__ import annotations

import os
import re
import shutil
import tempfile

import pytest

from imgpipe.components.common.formats import (
    conversion_summary,
    layout,
    served_models,
    serving_history,
)
from imgpipe.components.evaluator import evaluation as ev
from imgpipe.pipelines import cli, local_runner, run_summary, sample_photos
from imgpipe.pipelines import component_ids as ids
from imgpipe.pipelines import config as cfg
from imgpipe.pipelines.cli.errors import NOT_PUSHED_EXIT_CODE
from imgpipe.pipelines.cli.temporary import OWNER_FILE
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


@pytest.mark.unit
def test_a_beam_step_runs_its_args_as_given_and_packages_nothing(tmp_path, monkeypatch):
    from tfx.dsl.components.base import base_beam_executor

    from imgpipe.components.image_example_gen.executor import Executor
    from imgpipe.pipelines import tfx_patches
    from imgpipe.pipelines.beam_args import local_beam_args

    monkeypatch.setattr(tempfile, "tempdir", str(tmp_path))
    tfx_patches.no_tfx_sdist()
    args = local_beam_args([])
    context = base_beam_executor.BaseBeamExecutor.Context(beam_pipeline_args=args)
    executor = Executor(context)
    assert not any(a.startswith("--extra_package") for a in executor._beam_pipeline_args)
    assert os.listdir(tmp_path) == []


@pytest.mark.pipeline
def test_run_local_with_defaults_learns_pushes_and_a_rerun_pushes_nothing_new(
    tmp_path, capsys, monkeypatch
):
    # A recurring run must leave nothing behind in the temporary folder (TFX's Beam steps
    # once left a 52 MB copy of TFX there each: tfx_patches.no_tfx_sdist).
    temporary = tmp_path / "tmp"
    temporary.mkdir()
    monkeypatch.setattr(tempfile, "tempdir", str(temporary))
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
    assert lines["images"] == "600 written of 600 files seen, 0 skipped, 0 ignored"
    report = lines["image report"]
    assert report.endswith("report.html") and os.path.isfile(report)

    # The same data again: converted once (ImageExampleGen served from the cache), judged
    # against the push it made, and nothing pushed (docs/retraining.md, exit codes).
    assert cli.main(argv) == NOT_PUSHED_EXIT_CODE
    second = capsys.readouterr().out
    rerun = local_runner.latest_results(config)
    assert rerun.nodes[ids.EXAMPLE_GEN].state == "CACHED"
    assert rerun.nodes[ids.CHAMPION].state == "COMPLETE"  # never served from the cache
    assert f"champion             {champion.version} ({champion.path})" in second
    assert "not blessed: nothing new: trained on the same data" in second
    # ... and found so before training: the champion's model is the run's (unchanged.py).
    assert (
        f"training             not trained: nothing new since champion {champion.version}" in second
    )
    assert served_models.latest(str(serving)) == champion
    assert not os.path.exists(os.path.join(serving, ".decision-lock.json"))
    # Each command's folder (removed when the process exits: cli/temporary.py) holds
    # only its lock file and AutoGraph's generated modules (which TensorFlow removes at
    # exit too).
    assert {name.split("-")[1] for name in os.listdir(temporary)} == {"run"}
    left = [
        os.path.relpath(os.path.join(folder, name), temporary)
        for folder, folders, files in os.walk(temporary)
        for name in folders + files
        if folder != str(temporary)
        and not name.startswith("__autograph_generated")
        and name != OWNER_FILE
    ]
    assert left == []


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
    argv += ["--serving-dir", str(tmp_path / "serving")]  # no champion, whatever /tmp holds

    assert cli.main(argv) == 1
    (line,) = capsys.readouterr().err.splitlines()
    report = re.fullmatch(
        r"imgpipe: error: ImageStatistics found 2 data anomalies \(labels_differ, leakage\), "
        r"so the run stopped before training; see (\S+), then fix the data "
        r"\(or raise statistics.leakage_threshold if the copies are intended\)",
        line,
    ).group(1)
    assert os.path.isfile(report) and report.endswith(layout.REPORT_FILE)
    # A failed run collects too, and keeps its stop report (a full disk would otherwise
    # fail every run and free nothing): TFX's records of its finished steps are gone.
    assert list((tmp_path / "root").glob("*/.system/*/*")) == []


@pytest.mark.pipeline
def test_a_validation_folder_is_evaluated_and_the_data_gate_advice_can_be_followed(
    tmp_path, capsys
):
    """A Keras-style `training/ + validation/` tree, with one training image copied into
    validation, a class of one image and an empty class folder: the leakage gate stops
    the run with one message and no traceback; the setting it names lets the next run
    train on `training/` (the one-image class too) and evaluate on `validation/`."""
    data = tmp_path / "images"
    classes = ["animal", "fruit"]
    sample_photos.make_dataset(str(data / "training"), per_class=10, size=64, classes=classes)
    sample_photos.make_dataset(
        str(data / "validation"), per_class=3, size=64, classes=classes, seed=1
    )
    leaked = sorted(os.listdir(data / "training" / "animal"))[0]
    shutil.copy(
        data / "training" / "animal" / leaked, data / "validation" / "animal" / "leaked.jpg"
    )
    imagegen.write(
        str(data / "training" / "tiny" / "only.jpg"),
        imagegen.jpeg_bytes(imagegen.photo_like(64, 64, seed=5)),
    )
    (data / "training" / "empty").mkdir()
    settings = (
        "pipeline_name: gate-test\n"
        "trainer: {backbone: tiny_cnn, image_size: 32, epochs: 1, batch_size: 4,"
        " train_steps: 2, eval_steps: 1}\n"
        "beam_args: [--direct_num_workers=1, --direct_running_mode=in_memory]\n"
    )
    config_file = tmp_path / "config.yaml"
    config_file.write_text(settings)
    argv = [
        "run",
        "local",
        "--data",
        str(data),
        "--config",
        str(config_file),
        "--pipeline-root",
        str(tmp_path / "root"),
        "--serving-dir",
        str(tmp_path / "serving"),
    ]

    assert cli.main(argv) == 1
    (line,) = capsys.readouterr().err.splitlines()
    assert line.startswith("imgpipe: error: ImageStatistics found 1 data anomaly (leakage)")
    assert "(or raise statistics.leakage_threshold if the copies are intended)" in line
    report = re.search(r"; see (\S+), then", line).group(1)
    assert "validation/animal/leaked.jpg" in open(report).read()
    # The run checked the serving folder and took its lease first, and left nothing
    # there but the record of its stop in the history: no version, no lease, no span
    # admitted to a later window.
    assert os.listdir(tmp_path / "serving") == [serving_history.HISTORY_DIR]
    decisions, problems = serving_history.read(str(tmp_path / "serving"))
    assert [d.kind for d in decisions] == [serving_history.STOPPED] and problems == []

    config_file.write_text(settings + "statistics: {leakage_threshold: 0.5}\n")
    # Past the gate, the run finishes: two training steps may not earn a push (exit 3).
    assert cli.main(argv) in (0, NOT_PUSHED_EXIT_CODE)
    config = cfg.load(
        str(config_file),
        data_root=str(data),
        pipeline_root=str(tmp_path / "root"),
        serving_dir=str(tmp_path / "serving"),
    )
    result = local_runner.latest_results(config)
    assert {n.state for n in result.nodes.values()} <= {"COMPLETE", "CACHED"}
    examples = result.uri(ids.EXAMPLE_GEN, "examples")
    summary = conversion_summary.read(examples)
    assert summary.split_names == ["eval", "train"]
    assert summary.splits["train"].labels == {"animal": 10, "fruit": 10, "tiny": 1}
    assert [w.code for w in summary.warnings] == [
        conversion_summary.EMPTY_CLASS,
        conversion_summary.SMALL_CLASS,
    ]
    evaluation = ev.read(result.uri(ids.EVALUATOR, "evaluation"))
    assert (evaluation.eval_split, evaluation.candidate.examples) == ("eval", 7)
    # Two training steps: whether the floor blesses them is the Evaluator's call, tested
    # elsewhere; here the Pusher ran and followed it.
    serving = tmp_path / "serving"
    pushed = [n for n in os.listdir(serving) if n.isdigit()] if serving.exists() else []
    assert len(pushed) == int(evaluation.decision.blessed)


@pytest.mark.component
def test_the_summary_counts_what_conversion_skipped_and_names_where(tmp_path):
    from tests import trainer_helpers as th

    images = str(tmp_path / "images")
    imagegen.make_image_folder(images, {"a": 4, "b": 4})
    with open(os.path.join(images, "a", "notes.jpg"), "w") as f:
        f.write("not an image")  # a file named as an image: skipped, with its reason
    examples = str(tmp_path / "examples")
    th.convert(images, examples, num_shards=1)
    assert run_summary.conversion_lines(examples) == [
        "images               8 written of 9 files seen, 1 skipped, 0 ignored (each skipped "
        f"file and why: {os.path.join(examples, layout.SKIPPED_FILE)})"
    ]
    assert run_summary.conversion_lines(None) == []
