"""Retention (pipelines/retention.py): the serving folder keeps the served version and the
newest pushes a rollback may want, the window's span records and the acceptances of kept
versions; the pipeline root keeps what the window, TFX's cache and runs in progress need,
in a real MLMD store, and marks the rest DELETED so that TFX's cache never hands it out.
A collection cut short at any point leaves a state every reader takes, and the next
collection finishes it."""

from __future__ import annotations

import os
import time

import pytest

from imgpipe.components.common.formats import acceptances, model_config, served_models, spans
from imgpipe.pipelines import cli as imgpipe_cli
from imgpipe.pipelines import retention, retention_mlmd
from imgpipe.pipelines.collect import collect
from imgpipe.pipelines.config import PipelineConfig
from tests import plugin_patches
from tests.test_serving_folder import fake_model

pytestmark = pytest.mark.unit

KEEP_THREE = retention.RetentionConfig(keep_pushes=3, spare_spans=2)


def pushes(tmp_path, versions) -> str:
    from imgpipe.components.pusher import executor as pusher

    serving = str(tmp_path / "serving")
    for version in versions:
        pusher.publish(fake_model(str(tmp_path / "models" / str(version))), serving, now=version)
    return serving


def paths(plan: retention.Plan) -> list[str]:
    return [os.path.basename(r.path) for r in plan.removals]


def test_the_served_version_and_the_newest_pushes_stay(tmp_path):
    serving = pushes(tmp_path, [10, 20, 30, 40, 50, 60])
    plan = retention.serving_plan(serving, KEEP_THREE, trainer_spans=4)
    assert paths(plan) == ["10", "20"]
    assert retention.apply_serving(plan) == []
    assert served_models.complete_versions(serving) == [60, 50, 40, 30]
    assert served_models.find(serving).model.version == 60


def test_a_rolled_back_folder_keeps_what_it_serves_and_the_newest_others(tmp_path):
    serving = pushes(tmp_path, [10, 20, 30, 40, 50, 60])
    model_config.write(serving, 20)  # as a rollback to 20 leaves it
    plan = retention.serving_plan(serving, KEEP_THREE, trainer_spans=4)
    assert paths(plan) == ["10", "30"]
    retention.apply_serving(plan)
    assert served_models.complete_versions(serving) == [60, 50, 40, 20]
    assert model_config.served_version(serving) == 20


def test_a_version_cut_short_mid_deletion_is_not_read_and_the_next_collection_ends_it(
    tmp_path,
):
    serving = pushes(tmp_path, [10, 20, 30, 40, 50])
    # What a kill between the two deletions leaves: the marker gone, the files there.
    os.remove(os.path.join(serving, "10", served_models.PUSH_COMPLETE_FILE))
    assert 10 not in served_models.complete_versions(serving)
    assert served_models.find(serving).model.version == 50
    plan = retention.serving_plan(serving, KEEP_THREE, trainer_spans=4)
    assert paths(plan) == ["10"]
    assert "interrupted push" in plan.removals[0].reason
    retention.apply_serving(plan)
    assert not os.path.exists(os.path.join(serving, "10"))


def test_span_records_past_the_window_and_acceptances_of_gone_versions_go(tmp_path):
    serving = pushes(tmp_path, [10, 20, 30, 40, 50])
    for span in range(1, 9):
        spans.admit(serving, span, f"/root/ImageExampleGen/examples/{span}", ("a", "b"))
    accepted = acceptances.folder(serving)
    os.makedirs(accepted)
    for name in ("10-span-3.json", "50-span-8.json"):
        open(os.path.join(accepted, name), "w").close()
    plan = retention.serving_plan(serving, KEEP_THREE, trainer_spans=3)
    assert sorted(paths(plan)) == ["10", "10-span-3.json", *[f"span-{s}.json" for s in (1, 2, 3)]]
    retention.apply_serving(plan)
    assert [s.span for s in spans.admitted(serving)] == [8, 7, 6, 5, 4]
    assert os.listdir(accepted) == ["50-span-8.json"]


def test_leftovers_of_killed_runs_go_once_they_are_old(tmp_path):
    serving = pushes(tmp_path, [10])
    old, new = (os.path.join(serving, f".write-probe-{n}") for n in ("old", "new"))
    for path in (old, new):
        open(path, "w").close()
    hours_ago = time.time() - 2 * retention.LEFTOVER_AGE_S
    os.utime(old, (hours_ago, hours_ago))
    plan = retention.serving_plan(serving, KEEP_THREE, trainer_spans=4)
    assert paths(plan) == [".write-probe-old"]


def test_gc_refuses_a_folder_it_does_not_recognise_in_one_line(tmp_path, capsys):
    stranger = tmp_path / "home"
    stranger.mkdir()
    (stranger / "thesis.tex").write_text("years of work")
    code = imgpipe_cli.main(
        ["gc", "--serving-dir", str(stranger), "--pipeline-root", str(tmp_path / "root")]
    )
    err = capsys.readouterr().err.strip().splitlines()
    assert code == 1 and len(err) == 1, err
    assert err[0].startswith(f"imgpipe: error: gc refused: {stranger} is not a serving folder")
    assert (stranger / "thesis.tex").exists()


def test_gc_dry_run_lists_what_would_go_and_deletes_nothing(tmp_path, capsys):
    serving = pushes(tmp_path, [10, 20, 30, 40, 50])
    argv = ["gc", "--serving-dir", serving, "--pipeline-root", str(tmp_path / "root")]
    assert imgpipe_cli.main([*argv, "--dry-run"]) == 0
    out = capsys.readouterr().out
    assert f"would delete  {serving}/10: older than the 3 pushes kept for a rollback" in out
    assert f"keep  {serving}/50: served" in out
    assert served_models.complete_versions(serving) == [50, 40, 30, 20, 10]
    assert imgpipe_cli.main(argv) == 0
    assert served_models.complete_versions(serving) == [50, 40, 30, 20]


# ---- the pipeline root, in a real MLMD store -------------------------------------------


def mlmd_store(path: str):
    from ml_metadata.metadata_store import metadata_store
    from tfx.orchestration import metadata

    return metadata_store.MetadataStore(metadata.sqlite_metadata_connection_config(path))


def execution_with_output(store, root: str, node: str, state: str, name: str) -> tuple[int, str]:
    """An execution of `node` in pipeline `p` with one output artifact in its own folder."""
    from ml_metadata.proto import metadata_store_pb2 as pb

    context_type = store.put_context_type(pb.ContextType(name="node"))
    contexts = store.get_contexts_by_type("node")
    context = next((c for c in contexts if c.name == f"p.{node}"), None)
    if context is None:
        [context_id] = store.put_contexts([pb.Context(type_id=context_type, name=f"p.{node}")])
        [context] = store.get_contexts_by_id([context_id])
    execution_type = store.put_execution_type(pb.ExecutionType(name=node))
    artifact_type = store.put_artifact_type(pb.ArtifactType(name="Examples"))
    uri = os.path.join(root, node, "out", name)
    os.makedirs(uri)
    open(os.path.join(uri, "data"), "w").close()
    artifact = pb.Artifact(type_id=artifact_type, uri=uri, state=pb.Artifact.LIVE)
    execution = pb.Execution(type_id=execution_type, last_known_state=getattr(pb.Execution, state))
    event = pb.Event(type=pb.Event.OUTPUT)
    event.path.steps.add().key = "out"
    execution_id, [artifact_id], _ = store.put_execution(execution, [(artifact, event)], [context])
    return execution_id, uri


def test_the_pipeline_root_keeps_the_window_the_cache_and_runs_in_progress(tmp_path):
    from ml_metadata.proto import metadata_store_pb2 as pb

    root, db = str(tmp_path / "root"), str(tmp_path / "root" / "metadata.sqlite")
    os.makedirs(root)
    store = mlmd_store(db)
    old_span, old_uri = execution_with_output(store, root, "Gen", "COMPLETE", "1")
    _, window_uri = execution_with_output(store, root, "Gen", "COMPLETE", "2")
    latest_span, latest_uri = execution_with_output(store, root, "Gen", "COMPLETE", "3")
    _, old_model = execution_with_output(store, root, "Trainer", "COMPLETE", "4")
    _, running = execution_with_output(store, root, "Trainer", "RUNNING", "5")
    _, latest_model = execution_with_output(store, root, "Trainer", "COMPLETE", "6")

    plan = retention_mlmd.pipeline_root_plan(db, root, "p", [window_uri], 3)
    assert sorted(r.path for r in plan.removals) == [old_uri, old_model]
    assert retention_mlmd.apply_pipeline_root(plan, db) == []
    for gone in (old_uri, old_model):
        assert not os.path.exists(gone)
    for kept in (window_uri, latest_uri, running, latest_model):
        assert os.path.exists(kept)
    states = {a.uri: a.state for a in store.get_artifacts()}
    assert states[old_uri] == states[old_model] == pb.Artifact.DELETED
    assert states[window_uri] == pb.Artifact.LIVE
    # TFX's cache never hands out what is gone: the old execution's cache key finds nothing.
    assert plugin_patches.cache_hit(db, old_span) is None
    assert plugin_patches.cache_hit(db, latest_span) is not None
    assert retention_mlmd.pipeline_root_plan(db, root, "p", [window_uri], 3).removals == ()


def test_an_artifact_marked_by_a_collection_cut_short_is_finished_next_time(tmp_path):
    from ml_metadata.proto import metadata_store_pb2 as pb

    root, db = str(tmp_path / "root"), str(tmp_path / "root" / "metadata.sqlite")
    os.makedirs(root)
    store = mlmd_store(db)
    _, old_uri = execution_with_output(store, root, "Gen", "COMPLETE", "1")
    execution_with_output(store, root, "Gen", "COMPLETE", "2")
    [artifact] = [a for a in store.get_artifacts() if a.uri == old_uri]
    artifact.state = pb.Artifact.MARKED_FOR_DELETION  # killed after marking
    store.put_artifacts([artifact])
    plan = retention_mlmd.pipeline_root_plan(db, root, "p", [old_uri], 3)  # even in the window
    assert [r.reason for r in plan.removals] == ["marked by a collection that did not finish"]
    retention_mlmd.apply_pipeline_root(plan, db)
    assert not os.path.exists(old_uri)


def test_tfx_records_of_finished_steps_and_all_but_the_newest_stop_reports_go(tmp_path):
    """What no artifact row names: the folders TFX's launcher leaves under <step>/.system/
    once a step has nothing running, and the reports of stopped runs but the newest."""
    from imgpipe.components.common.formats import layout

    root, db = str(tmp_path / "root"), str(tmp_path / "root" / "metadata.sqlite")
    os.makedirs(root)
    store = mlmd_store(db)
    execution_with_output(store, root, "Gen", "COMPLETE", "1")
    execution_with_output(store, root, "Stats", "FAILED", "2")
    execution_with_output(store, root, "Trainer", "RUNNING", "3")
    finished = [
        os.path.join(root, "Gen", ".system", "executor_execution", "1"),
        os.path.join(root, "Gen", ".system", "driver_execution", "1796014649625629"),
        os.path.join(root, "Stats", ".system", "stateful_working_dir", "16e53a9c"),
    ]
    running = os.path.join(root, "Trainer", ".system", "executor_execution", "3", ".temp")
    for folder in [*finished, running]:
        os.makedirs(folder)
    reports = {
        n: os.path.join(root, "Stats", "out", f"{n}{layout.REJECTED_SUFFIX}")
        for n in (8, 9, 10, 11)
    }
    for report in reports.values():
        os.makedirs(report)
        open(os.path.join(report, layout.REPORT_FILE), "w").close()

    plan = retention_mlmd.pipeline_root_plan(db, root, "p", [], keep_stop_reports=2)
    assert sorted((r.path, r.reason) for r in plan.removals) == sorted(
        [(os.path.dirname(f), "TFX's records of finished executions (1)") for f in finished]
        + [(reports[n], "the report of a stopped run, older than the 2 newest") for n in (8, 9)]
    )
    assert retention.apply_serving(plan) == []
    assert os.path.isdir(running) and os.path.isdir(reports[10]) and os.path.isdir(reports[11])
    assert retention_mlmd.pipeline_root_plan(db, root, "p", [], keep_stop_reports=2).removals == ()
    with pytest.raises(ValueError, match="keep_stop_reports must be 0 or more, got -1"):
        retention.RetentionConfig(keep_stop_reports=-1).validate()


def in_run(store, execution_id: int, run_id: str) -> None:
    """Puts the execution in the pipeline_run context `run_id`, as TFX's runner does."""
    from ml_metadata.proto import metadata_store_pb2 as pb

    run_type = store.put_context_type(pb.ContextType(name="pipeline_run"))
    [context_id] = store.put_contexts([pb.Context(type_id=run_type, name=run_id)])
    store.put_attributions_and_associations(
        [], [pb.Association(context_id=context_id, execution_id=execution_id)]
    )


def test_steps_a_killed_run_left_running_are_named_canceled_and_collected(tmp_path):
    import subprocess

    from ml_metadata.proto import metadata_store_pb2 as pb

    from imgpipe.pipelines import run_markers

    root, db = str(tmp_path / "root"), str(tmp_path / "root" / "metadata.sqlite")
    os.makedirs(root)
    store = mlmd_store(db)
    killed, killed_uri = execution_with_output(store, root, "Pusher", "RUNNING", "1")
    working, working_uri = execution_with_output(store, root, "Trainer", "RUNNING", "2")
    unmarked, _ = execution_with_output(store, root, "Evaluator", "RUNNING", "3")
    in_run(store, killed, "killed-run")
    in_run(store, working, "working-run")
    in_run(store, unmarked, "run-without-marker")
    execution_with_output(store, root, "Pusher", "COMPLETE", "4")
    ended = subprocess.Popen(["true"])
    ended.wait()
    with run_markers.running(db, "killed-run"):
        pass
    marker = os.path.join(root, run_markers.MARKERS_DIR, "killed-run.json")
    with open(marker, "w") as f:  # what a SIGKILL leaves: the marker of a pid now ended
        f.write(f'{{"run_id": "killed-run", "host": "{os.uname().nodename}", "pid": {ended.pid}}}')

    with run_markers.running(db, "working-run"):
        live = run_markers.live(db)
        assert live == {"working-run"}
        assert not os.path.exists(marker)  # an ended run's marker goes once read
        lines = retention_mlmd.cancel_abandoned(db, "p", live, dry_run=True)
        assert sorted(lines) == [
            "Evaluator of run run-without-marker was left RUNNING by a run that was killed: "
            "would mark it CANCELED",
            "Pusher of run killed-run was left RUNNING by a run that was killed: would mark "
            "it CANCELED",
        ]
        assert retention_mlmd.cancel_abandoned(db, "p", live) == [
            line.replace("would mark it", "marked") for line in lines
        ]
        assert retention_mlmd.cancel_abandoned(db, "p", live) == []  # once
    states = {e.id: e.last_known_state for e in store.get_executions()}
    assert states[killed] == states[unmarked] == pb.Execution.CANCELED
    assert states[working] == pb.Execution.RUNNING
    # A canceled step's outputs are collected like a failed one's; a working one's stay.
    plan = retention_mlmd.pipeline_root_plan(db, root, "p", [], 3)
    assert killed_uri in [r.path for r in plan.removals]
    assert working_uri not in [r.path for r in plan.removals]


def test_a_collection_waits_for_no_one_and_skips_while_another_run_holds_the_lease(tmp_path):
    from imgpipe.components.common.storage import serving_lock

    serving = pushes(tmp_path, [10, 20, 30, 40, 50])
    lease = serving_lock.acquire(serving, "another run")
    config = PipelineConfig(serving_dir=serving, pipeline_root=str(tmp_path / "root"))
    try:
        collected = collect(config)
        listed = collect(config, dry_run=True)
    finally:
        serving_lock.release(serving, lease.token)
    assert collected.summary() == f"skipped: another run (another run) holds {serving}"
    assert listed.summary() == collected.summary()
    assert served_models.complete_versions(serving) == [50, 40, 30, 20, 10]
    assert collect(config, dry_run=True).summary() == "would delete 1 item(s)"
    assert collect(config).summary() == "deleted 1 item(s)"
    assert serving_lock.current(serving) is None  # its own lease given back


def test_the_record_holder_stays_and_a_gone_one_is_named_at_the_head(tmp_path):
    from imgpipe.components.common.formats import champion, record_holder

    serving = pushes(tmp_path, [10, 20, 30, 40, 50, 60])
    record_holder.write(serving, record_holder.RecordHolder(10, ("a", "b"), 0.0))
    plan = retention.serving_plan(serving, KEEP_THREE, trainer_spans=4)
    assert paths(plan) == ["20"]
    assert f"{serving}/10: record holder" in plan.kept
    resolved = champion.resolve(serving)
    assert (resolved.champion_version, resolved.record_version) == (60, 10)
    record_holder.write(serving, record_holder.RecordHolder(5, ("a", "b"), 0.0))
    resolved = champion.resolve(serving)
    assert resolved.record_version is None
    assert resolved.record_note == "record holder 5 is gone; the champion stands for it"
