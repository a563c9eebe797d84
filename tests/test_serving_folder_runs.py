"""The serving folder's rules on real models (docs/serving-folder.md): a damaged champion
is passed over the same way by the warm start, drift and the Evaluator, and two retrains
deciding at once on one serving folder take turns, the second judged against the first
one's push."""

from __future__ import annotations

import os
import threading

import pytest
from tfx import types
from tfx.types import standard_artifacts

from imgpipe.components.common.formats import served_models
from imgpipe.components.common.images.model_input import ModelInput
from imgpipe.components.common.storage import fileio, serving_lock
from imgpipe.components.evaluator import evaluation as ev
from imgpipe.components.evaluator.config import EvaluatorConfig
from imgpipe.components.pusher import executor as pusher
from tests import test_evaluator as te
from tests import trainer_helpers as th
from tests.test_serving_folder import run_pusher, truncate

pytestmark = pytest.mark.component


def resolve(serving: str):
    from imgpipe.components.common.formats import champion

    return champion.resolve(serving)


@pytest.fixture(scope="module")
def trained():
    return te._trained_model()


def export(model, model_uri: str, stats: str | None = None) -> str:
    """The Trainer's output: <model_uri>/Format-Serving, with the manifest."""
    from imgpipe.components.common.storage import outputs
    from imgpipe.components.trainer import export as export_lib

    outputs.publish_folder(
        model_uri,
        "Format-Serving",
        lambda folder: export_lib.export_serving_model(
            model, folder, th.CLASSES, ModelInput(te.MEAN, te.STD, te.SIZE), statistics_uri=stats
        ),
    )
    return os.path.join(model_uri, "Format-Serving")


def test_warm_start_passes_over_a_push_whose_label_map_is_truncated(tmp_path, trained):
    import dataclasses

    from imgpipe.components.trainer import model as model_lib
    from imgpipe.components.trainer import warm_start
    from imgpipe.components.trainer.config import TrainerConfig

    serving = str(tmp_path / "serving")
    older = pusher.publish(export(trained, str(tmp_path / "m1")), serving, now=100)
    newer = pusher.publish(export(trained, str(tmp_path / "m2")), serving, now=200)
    truncate(os.path.join(newer, "assets.extra", "label_map.json"))
    config = TrainerConfig(backbone="tiny_cnn", image_size=te.SIZE, warm_start=True)
    model = model_lib.build_model(
        dataclasses.replace(config, seed=3), 3, ModelInput(te.MEAN, te.STD, te.SIZE)
    )
    outcome = warm_start.apply(
        model, config, list(th.CLASSES), resolve(serving), ModelInput(te.MEAN, te.STD, te.SIZE)
    )
    assert outcome.status == warm_start.FULL and outcome.champion == older
    assert outcome.note == (
        f"from champion {older} ({newer}: damaged (assets.extra/label_map.json: size 1 != "
        f"{served_models.manifest.read(newer).files['assets.extra/label_map.json'].size}); "
        "using 100)"
    )
    # Nothing sound left: a fresh model, and why; the schedule goes on.
    truncate(os.path.join(older, "saved_model.pb"))
    outcome = warm_start.apply(
        model, config, list(th.CLASSES), resolve(serving), ModelInput(te.MEAN, te.STD, te.SIZE)
    )
    assert outcome.status == warm_start.FRESH
    assert outcome.note.startswith(f"no champion in {serving}: fresh ({newer}: damaged")
    assert outcome.note.endswith("no sound push left)")


def test_the_evaluator_and_drift_pass_over_a_push_whose_graph_is_truncated(tmp_path, trained):
    from imgpipe.components.image_statistics import baseline

    examples = te._examples(tmp_path)
    stats = th.write_stats(str(tmp_path / "stats"), te.SIZE, te.MEAN, te.STD)
    serving = str(tmp_path / "serving")
    older = pusher.publish(export(trained, str(tmp_path / "m1"), stats), serving, now=100)
    newer = pusher.publish(export(trained, str(tmp_path / "m2"), stats), serving, now=200)
    truncate(os.path.join(newer, "saved_model.pb"), 10)
    line = f"{newer}: damaged (saved_model.pb: size 10 != "

    candidate = export(trained, str(tmp_path / "candidate"))
    result, blessed = th.evaluate(tmp_path, "c", examples, candidate, serving, significance=0.05)
    assert result.champion.status == ev.COMPARED and result.champion.version == 100
    assert result.champion.note.startswith(line) and result.champion.note.endswith("; using 100")
    assert f"not worse than champion 100 ({line}" in result.decision.reason
    assert blessed.get_int_custom_property(serving_lock.SERVING_HEAD_PROPERTY) == 200
    assert blessed.get_int_custom_property(serving_lock.SERVED_PROPERTY) == 200

    found = baseline.from_serving_dir(serving)
    assert found.uri == os.path.join(older, "assets.extra", "image_stats.json")
    assert found.stats is not None and found.note.startswith(line)

    # Every push damaged: the floor alone, said so, never silently.
    truncate(os.path.join(older, "assets.extra", "label_map.json"))
    result, _ = th.evaluate(tmp_path, "d", examples, candidate, serving, significance=0.05)
    assert result.champion.status == ev.UNREADABLE
    assert result.decision.reason.endswith("; no sound push left")
    assert f"floor alone: {line}" in result.decision.reason
    found = baseline.from_serving_dir(serving)
    assert found.stats is None and found.reason.startswith(line)


def retrain_at_once(tmp_path, examples, candidates: list[str], serving: str):
    """Each candidate's run (ChampionResolver, Evaluator, Pusher), all started together
    in threads; returns [(evaluation, pushed model)] in candidate order."""
    from imgpipe.components.evaluator.component import ImageEvaluator
    from imgpipe.components.evaluator.executor import Executor

    start = threading.Barrier(len(candidates))
    results: list = [None] * len(candidates)
    errors: list[BaseException] = []

    def retrain(i: int, model_dir: str) -> None:
        try:
            model = standard_artifacts.Model()
            model.uri = os.path.dirname(model_dir)
            evaluation, blessing = (
                standard_artifacts.ModelEvaluation(),
                standard_artifacts.ModelBlessing(),
            )
            evaluation.uri = str(tmp_path / f"run{i}" / "evaluation")
            blessing.uri = str(tmp_path / f"run{i}" / "blessing")
            component = ImageEvaluator(
                types.Channel(type=standard_artifacts.Examples),
                types.Channel(type=standard_artifacts.Model),
                EvaluatorConfig(significance=0.05),
            )
            start.wait()
            # The run's head: the second resolver waits here until the first has pushed.
            champion = th.resolve_champion(str(tmp_path / f"run{i}"), serving)
            Executor().Do(
                {"examples": [examples], "model": [model], "champion": [champion]},
                {"evaluation": [evaluation], "blessing": [blessing]},
                component.exec_properties,
            )
            results[i] = (ev.read(evaluation.uri), run_pusher(model.uri, blessing, serving))
        except BaseException as e:  # noqa: BLE001 - re-raised in the test's thread
            errors.append(e)

    threads = [threading.Thread(target=retrain, args=c) for c in enumerate(candidates)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    if errors:
        raise errors[0]
    return results


def check_they_took_turns(results, serving: str) -> None:
    """The second decision was judged against the first one's push, and both pushed."""
    assert [p.get_int_custom_property("pushed") for _, p in results] == [1, 1]
    pushed = [int(p.get_string_custom_property("pushed_version")) for _, p in results]
    first, second = sorted(range(2), key=lambda i: pushed[i])
    assert results[first][0].champion.status == ev.NO_CHAMPION
    assert results[second][0].champion.status == ev.COMPARED
    assert results[second][0].champion.version == pushed[first]
    assert served_models.complete_versions(serving) == sorted(pushed, reverse=True)
    assert not fileio.exists(serving_lock.path_of(serving))


def test_two_retrains_at_once_take_turns_on_a_local_serving_folder(tmp_path, trained, monkeypatch):
    monkeypatch.setattr(serving_lock, "POLL_SECONDS", 0.05)
    examples = te._examples(tmp_path)
    candidates = [export(trained, str(tmp_path / f"candidate{i}")) for i in range(2)]
    serving = str(tmp_path / "serving")
    check_they_took_turns(retrain_at_once(tmp_path, examples, candidates, serving), serving)


def test_on_a_local_disk_a_killed_push_is_never_listed(tmp_path):
    from tests.test_serving_folder_stores import check_a_server_sees_only_whole_versions

    watcher = check_a_server_sees_only_whole_versions(str(tmp_path / "serving"), tmp_path)
    assert not watcher.partial_listed  # staged under .push-<version>, renamed whole
