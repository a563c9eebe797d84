"""A grey span cannot replace a colour champion, even with its drift accepted: through
`imgpipe run local`, on real photos (OpenCV's samples, pipelines/sample_photos.py),
span after span in one pipeline root and serving directory.

span 1 (colour) is pushed, exit 0, and the push keeps its reference set; span 2 (the
same photos in grey) is stopped by the drift gate with advice that accepts span 2 only;
accepted with --accept-drift 2, it stops at the label audit (accepting drift never turns
it off), with advice that accepts that too; accepted for both, a model trained on the grey
span alone (trainer.spans 1: with the default window it would train on the colour span
too, and be judged on its merits) is scored beside the champion on the champion's colour
reference set, refused, and the run exits 3 (nothing pushed). Each summary reads its own
run's executions.
"""

from __future__ import annotations

import glob
import os
import shutil

import pytest

from imgpipe.components.common.formats import reference_sets, served_models
from imgpipe.pipelines import cli, local_runner
from imgpipe.pipelines import component_ids as ids
from imgpipe.pipelines import config as cfg
from imgpipe.pipelines.cli.errors import NOT_PUSHED_EXIT_CODE

SETTINGS = """\
pipeline_name: reference-test
trainer: {backbone: tiny_cnn, image_size: 48, epochs: 6, min_train_steps: 120, batch_size: 16,
          tensorboard_images: 0, spans: 1}
example_gen: {output: {num_shards: 1}}
beam_args: [--direct_num_workers=1, --direct_running_mode=in_memory]
"""


def _grey_copy(source: str, target: str) -> None:
    import cv2

    for path in glob.glob(os.path.join(source, "*", "*.jpg")):
        label, name = path.split(os.sep)[-2:]
        grey = cv2.cvtColor(cv2.imread(path, cv2.IMREAD_COLOR), cv2.COLOR_BGR2GRAY)
        os.makedirs(os.path.join(target, label), exist_ok=True)
        cv2.imwrite(os.path.join(target, label, name), cv2.cvtColor(grey, cv2.COLOR_GRAY2BGR))


def _summary(out: str) -> dict[str, str]:
    return {line[:21].strip(): line[21:] for line in out.splitlines() if line[:1].isalpha()}


@pytest.mark.pipeline
def test_a_grey_span_with_drift_accepted_is_not_pushed_over_a_colour_champion(tmp_path, capsys):
    from imgpipe.pipelines import sample_photos

    images = tmp_path / "images"
    staged = str(tmp_path / "staged")
    sample_photos.make_dataset(os.path.join(staged, "colour"), per_class=40, size=64)
    _grey_copy(os.path.join(staged, "colour"), os.path.join(staged, "grey"))
    config_file = tmp_path / "pipeline.yaml"
    config_file.write_text(SETTINGS)
    serving = str(tmp_path / "serving")
    argv = ["run", "local", "--data", str(images / "span-{SPAN}"), "--config", str(config_file)]
    argv += ["--pipeline-root", str(tmp_path / "root"), "--serving-dir", serving]
    config = cfg.load(
        str(config_file),
        data_root=str(images / "span-{SPAN}"),
        pipeline_root=str(tmp_path / "root"),
        serving_dir=serving,
    )

    os.makedirs(images)
    shutil.copytree(os.path.join(staged, "colour"), images / "span-1")
    assert cli.main(argv) == 0, capsys.readouterr().err
    first = _summary(capsys.readouterr().out)
    champion = served_models.latest(serving)
    assert champion is not None and first["model (served)"] == champion.path
    kept = reference_sets.read(champion.reference_dir)
    assert kept.labels == champion.labels

    shutil.copytree(os.path.join(staged, "grey"), images / "span-2")
    assert cli.main(argv) == 1
    (line,) = capsys.readouterr().err.splitlines()
    # The champion's label audit of grey photos flags them too; drift is what stops it.
    assert line.startswith("imgpipe: error: ImageStatistics found") and "drift" in line
    assert "imgpipe run local --accept-drift 2" in line and ": false" not in line, line

    # Accepting drift never turns the label audit off: the colour champion finds the grey
    # photos mislabelled, and the stop names the acceptance that fits that cause.
    assert cli.main([*argv, "--accept-drift", "2"]) == 1
    (line,) = capsys.readouterr().err.splitlines()
    assert "(label_issues)" in line and "imgpipe run local --accept-label-issues 2" in line
    assert "--accept-drift" not in line

    accepted = [*argv, "--accept-drift", "2", "--accept-label-issues", "2"]
    assert cli.main(accepted) == NOT_PUSHED_EXIT_CODE
    third = _summary(capsys.readouterr().out)
    assert third["drift accepted"].startswith("span 2: accepted by accept_drift_span")
    assert third["label audit"].endswith(
        "above the gate, accepted (span 2, by accept_label_issues_span)"
    )
    assert third["data"].endswith("(span 2)")
    # Scored beside the champion on the colour photos it was blessed on, and refused.
    assert third[reference_sets.CHAMPION_REFERENCE].startswith("candidate ")
    assert kept.uri in third[reference_sets.CHAMPION_REFERENCE]
    assert third["blessing"].startswith("not blessed: ")
    assert third["model (served)"].startswith("not pushed")
    assert served_models.latest(serving) == champion

    # Each run's results are its own: the stopped run has no Trainer or Evaluator, and
    # the first run's evaluation is not the third's.
    from ml_metadata.metadata_store import metadata_store
    from tfx.orchestration import metadata

    store = metadata_store.MetadataStore(
        metadata.sqlite_metadata_connection_config(config.local_metadata_path)
    )
    runs = sorted(store.get_contexts_by_type(local_runner.PIPELINE_RUN_CONTEXT), key=lambda c: c.id)
    assert len(runs) == 4
    one, stopped, _, three = (local_runner.latest_results(config, run.name) for run in runs)
    assert one.pushed and not three.pushed
    assert ids.TRAINER not in stopped.nodes and ids.IMAGE_STATISTICS in stopped.nodes
    assert one.uri(ids.EVALUATOR, "evaluation") != three.uri(ids.EVALUATOR, "evaluation")
    assert three.uri(ids.EVALUATOR, "evaluation") in third["evaluation"]
    # The grey span passed its gates only by the acceptances, and its model says so
    # (the Evaluator leaves its images out once a later window has moved past it); the
    # colour span passed on its own (its Trainer output is gone: its push holds it).
    from tfx.utils import path_utils

    grey_model = path_utils.serving_model_path(three.uri(ids.TRAINER, "model") or "")
    assert served_models.training_of(grey_model)["accepted_spans"] == [2]
    assert served_models.training_of(champion.path)["accepted_spans"] == []
