"""Retention on Kubeflow (pipelines/retention_runs.py): every step records its run's
folder in the pipeline root, and the end of a run deletes the earlier runs' folders but
the Examples of the spans whose records stay; a young folder (a run that may still be
going), the collecting run's own and anything never recorded (another pipeline sharing
the root) stay. Paths laid out as KFP lays them out; the object stores' own check is in
test_serving_folder_stores.py."""

from __future__ import annotations

import json
import os
import time

import pytest
from google.protobuf import json_format

from imgpipe.components.common.formats import spans
from imgpipe.components.common.storage import fileio, launcher_mounts
from imgpipe.pipelines import cli as imgpipe_cli
from imgpipe.pipelines import retention, run_folders
from imgpipe.pipelines.collect import Scope, collect
from imgpipe.pipelines.container import retention_step
from imgpipe.pipelines.kfp_contract import RUN_FOLDERS_ENV
from tests.test_retention import pushes

pytestmark = pytest.mark.unit

DAY_S = 86400.0
TASKS = {
    "ImageExampleGen": "examples",
    "StatisticsGen": "statistics",
    "Trainer": "model",
    "Pusher": "pushed_model",
}
KEEP = retention.RetentionConfig(keep_pushes=1, spare_spans=0, kubeflow_run_hours=48.0)


def kfp_run(root: str, run_id: str) -> str:
    """A run folder as KFP writes one: <root>/<pipeline>/<run id>/<task>/<artifact>."""
    folder = os.path.join(root, "imgpipe", run_id)
    for task, artifact in TASKS.items():
        path = os.path.join(folder, task, artifact)
        os.makedirs(path)
        with open(os.path.join(path, "data.bin"), "wb") as f:
            f.write(b"x" * 100)
    return folder


def examples_of(folder: str) -> str:
    return os.path.join(folder, "ImageExampleGen", "examples")


def scope(serving: str, root: str, this_run: str = "", trainer_spans: int = 2) -> Scope:
    return Scope(serving, KEEP, trainer_spans, pipeline_root=root, this_run_folder=this_run)


def test_earlier_run_folders_go_but_the_examples_of_kept_spans(tmp_path):
    serving = pushes(tmp_path, [10, 20])
    root = str(tmp_path / "root")
    now = time.time()
    old, kept, young, this = (kfp_run(root, r) for r in ("run-1", "run-2", "run-3", "run-4"))
    run_folders.register(root, old, now - 5 * DAY_S)
    run_folders.register(root, kept, now - 4 * DAY_S)
    run_folders.register(root, young, now - 3600)
    run_folders.register(root, this, now)
    spans.admit(serving, 2, examples_of(kept), ("a", "b"))
    spans.admit(serving, 4, examples_of(this), ("a", "b"))
    another_pipeline = kfp_run(str(tmp_path / "root"), "never-recorded")

    collected = collect(scope(serving, root, this))

    assert collected.problems == ()
    assert not os.path.exists(old)
    assert not os.path.exists(run_folders.record_path(root, old))
    assert sorted(os.listdir(kept)) == ["ImageExampleGen"]  # the Examples of span 2
    assert os.listdir(examples_of(kept)) == ["data.bin"]
    for whole in (young, this, another_pipeline):
        assert sorted(os.listdir(whole)) == sorted(TASKS), whole
    assert {r.run_folder for r in run_folders.registered(root)} == {kept, young, this}
    kept_lines = "\n".join(collected.plan.kept)
    assert "may still be going" in kept_lines and "Examples of a span" in kept_lines

    # Nothing more to do until the span leaves the window's reach; then the folder goes.
    assert collect(scope(serving, root, this)).plan.removals == ()
    spans.admit(serving, 5, examples_of(this), ("a", "b"))
    collect(scope(serving, root, this))
    assert not os.path.exists(kept)
    assert {r.run_folder for r in run_folders.registered(root)} == {young, this}


def test_a_collection_cut_short_after_a_folder_is_finished_by_the_next(tmp_path):
    serving = pushes(tmp_path, [10])
    root = str(tmp_path / "root")
    gone = kfp_run(root, "run-1")
    run_folders.register(root, gone, time.time() - 5 * DAY_S)
    fileio.remove(gone)  # killed between the folder and its record
    collected = collect(scope(serving, root))
    assert collected.problems == ()
    assert run_folders.registered(root) == []


def test_a_damaged_record_is_named_and_stops_nothing(tmp_path):
    serving = pushes(tmp_path, [10])
    root = str(tmp_path / "root")
    old = kfp_run(root, "run-1")
    run_folders.register(root, old, time.time() - 5 * DAY_S)
    damaged = run_folders.record_path(root, "elsewhere")
    with open(damaged, "w") as f:
        f.write('{"run_folder": "/x", "regist')
    collected = collect(scope(serving, root))
    assert not os.path.exists(old)
    assert any(damaged in line and "cannot be read" in line for line in collected.plan.kept)


def test_the_first_record_of_a_run_wins_so_its_age_is_the_runs(tmp_path):
    root = str(tmp_path / "root")
    folder = str(tmp_path / "root" / "imgpipe" / "run-1")
    assert run_folders.register(root, folder, 1000.0)
    assert not run_folders.register(root, folder, 2000.0)
    assert [r.registered for r in run_folders.registered(root)] == [1000.0]


def test_gc_dry_run_lists_the_run_folders_and_deletes_nothing(tmp_path, capsys):
    serving = pushes(tmp_path, [10])
    root = str(tmp_path / "root")
    old = kfp_run(root, "run-1")
    run_folders.register(root, old, time.time() - 5 * DAY_S)
    code = imgpipe_cli.main(["gc", "--serving-dir", serving, "--pipeline-root", root, "--dry-run"])
    out = capsys.readouterr().out
    assert code == 0, out
    assert f"would delete  {old}: an earlier Kubeflow run's folder" in out
    assert os.path.exists(old)


def test_launcher_mount_paths_are_recorded_as_their_stores_uris(tmp_path):
    assert launcher_mounts.store_uri("/minio/mlpipeline/v2/a") == "s3://mlpipeline/v2/a"
    assert launcher_mounts.store_uri("/gcs/b/p") == "gs://b/p"
    assert launcher_mounts.store_uri("minio://mlpipeline/x") == "s3://mlpipeline/x"
    assert launcher_mounts.store_uri("/data/x") == "/data/x"
    assert launcher_mounts.local_path("s3://b/x") == "/s3/b/x"
    assert run_folders.run_folder_of("/s3/b/root/imgpipe/run-9/Trainer/model/") == (
        "s3://b/root/imgpipe/run-9"
    )
    serving = str(tmp_path / "serving")
    spans.admit(serving, 3, "/gcs/b/root/imgpipe/run-9/ImageExampleGen/examples", ("a",))
    assert spans.admitted(serving)[0].examples_uri == (
        "gs://b/root/imgpipe/run-9/ImageExampleGen/examples"
    )


def executor_input(uri: str):
    from kfp.pipeline_spec import pipeline_spec_pb2

    return json_format.ParseDict(
        {"outputs": {"artifacts": {"model": {"artifacts": [{"uri": uri}]}}}},
        pipeline_spec_pb2.ExecutorInput(),
    )


def test_a_step_records_its_run_and_the_pushers_step_collects(tmp_path, caplog):
    serving = pushes(tmp_path, [10, 20, 30])
    root = str(tmp_path / "root")
    old, this = kfp_run(root, "run-1"), kfp_run(root, "run-2")
    run_folders.register(root, old, time.time() - 5 * DAY_S)
    local = "/s3/unused"  # a launcher's local copy maps back to the URI KFP gave
    remote_of = {local: os.path.join(this, "Trainer", "model")}
    settings = {"pipeline_root": root}
    step = retention_step.settings({RUN_FOLDERS_ENV: json.dumps(settings)})
    folder = retention_step.run_folder(executor_input(local), remote_of)
    assert folder == this
    retention_step.record(step, folder)
    assert retention_step.collect(step, folder) == ""  # only the Pusher's step collects

    pusher = {
        **settings,
        "collect": {
            "serving_dir": serving,
            "trainer_spans": 2,
            "retention": {"keep_pushes": 1, "spare_spans": 0},
        },
    }
    line = retention_step.collect(
        retention_step.settings({RUN_FOLDERS_ENV: json.dumps(pusher)}), folder
    )
    assert line.startswith("retention: deleted"), line
    assert not os.path.exists(old) and os.path.exists(this)
    versions = sorted(int(v) for v in os.listdir(serving) if v.isdigit())
    assert versions == [20, 30]


def test_a_step_whose_pipeline_root_cannot_be_written_warns_and_goes_on(tmp_path, caplog):
    blocked = tmp_path / "file"
    blocked.write_text("not a folder")
    retention_step.record({"pipeline_root": str(blocked / "root")}, "/root/imgpipe/run-1")
    assert "could not record run folder" in caplog.text
    assert retention_step.settings({RUN_FOLDERS_ENV: "{not json"}) is None
    assert "is not the compiler's settings" in caplog.text
