"""Blessing that cannot be fooled by the new split: every candidate is also judged
beside the champion on the champion's reference set (the examples it was blessed on)
and on a golden set, on the classes both models know; a new class clears its own floor.

The rules on hand-made metrics; the Evaluator executor and ImagePusher on real photos
(OpenCV's samples, pipelines/sample_photos.py) and tiny models trained here.
"""

from __future__ import annotations

import glob
import json
import os

import numpy as np
import pytest

from imgpipe.components.common.formats import reference_sets, served_models
from imgpipe.components.evaluator import blessing, scoring
from imgpipe.components.evaluator import evaluation as ev
from imgpipe.components.evaluator.config import EvaluatorConfig
from tests import trainer_helpers as th


def metrics(*classes: tuple[str, int, int, int]) -> ev.ModelMetrics:
    """(label, examples, correct, predicted) per class."""
    return ev.ModelMetrics.of(tuple(ev.ClassMetrics(*c) for c in classes))


def comparison(name: str, candidate: ev.ModelMetrics, champion: ev.ModelMetrics):
    classes = tuple(c.label for c in candidate.per_class)
    return ev.Comparison(name, f"/{name}", True, "", classes, candidate, champion)


CHAMPION = ev.Champion(ev.COMPARED, "", "/serving/100", 100)
GOOD = metrics(("a", 50, 45, 50), ("b", 50, 45, 50))


# --- the rules ----------------------------------------------------------------------------


@pytest.mark.unit
def test_a_regression_on_the_champions_reference_set_refuses_whatever_the_new_split_says():
    config = EvaluatorConfig(significance=0.0)
    # On the new (grey) split the champion is weak and the candidate shines.
    weak = metrics(("a", 50, 20, 40), ("b", 50, 25, 60))
    new_split = comparison(reference_sets.NEW_SPLIT, GOOD, weak)
    # On the colour photos the champion was blessed on, the candidate collapses.
    reference = comparison(
        reference_sets.CHAMPION_REFERENCE,
        metrics(("a", 40, 12, 30), ("b", 40, 11, 50)),
        metrics(("a", 40, 39, 40), ("b", 40, 39, 40)),
    )
    decision = blessing.decide(GOOD, CHAMPION, config, [new_split, reference])
    assert not decision.blessed
    assert decision.reason.startswith("not blessed: on champion_reference (80 images)")
    failed = {c.name for c in decision.checks if not c.passed}
    assert "not_worse_than_champion:champion_reference" in failed
    assert "not_worse_than_champion:new_split" not in failed
    # The same on the golden set.
    golden = dataclasses_replace_name(reference, reference_sets.GOLDEN)
    assert not blessing.decide(GOOD, CHAMPION, config, [new_split, golden]).blessed
    # Not worse anywhere: blessed, and the reason names every set compared and skipped.
    fine = comparison(reference_sets.CHAMPION_REFERENCE, GOOD, GOOD)
    skipped = ev.Comparison(reference_sets.GOLDEN, "/g", False, "skipped: unreadable")
    decision = blessing.decide(GOOD, CHAMPION, config, [new_split, fine, skipped])
    assert decision.blessed, decision.reason
    assert "not worse than champion 100 on new_split, champion_reference" in decision.reason
    assert "(golden skipped)" in decision.reason


def dataclasses_replace_name(c: ev.Comparison, name: str) -> ev.Comparison:
    import dataclasses

    return dataclasses.replace(c, name=name)


@pytest.mark.unit
def test_a_new_class_clears_its_own_floor_and_the_rest_is_compared_on_shared_classes():
    config = EvaluatorConfig(significance=0.0, new_class_min_recall=0.5)
    added = ev.Champion(ev.COMPARED, "added", "/serving/100", 100, classes_added=("c",))
    candidate = metrics(("a", 50, 45, 50), ("b", 50, 45, 50), ("c", 20, 6, 10))
    shared = comparison(reference_sets.NEW_SPLIT, GOOD, GOOD)
    decision = blessing.decide(candidate, added, config, [shared])
    assert not decision.blessed
    assert "new class 'c': recall 0.3000 on 20 new eval images vs floor 0.5000" in decision.reason
    learnt = metrics(("a", 50, 45, 50), ("b", 50, 45, 50), ("c", 20, 15, 20))
    assert blessing.decide(learnt, added, config, [shared]).blessed
    # Worse on the shared classes: refused, although the new class is learnt.
    worse = comparison(
        reference_sets.NEW_SPLIT, metrics(("a", 50, 30, 50), ("b", 50, 30, 50)), GOOD
    )
    assert not blessing.decide(learnt, added, config, [worse]).blessed
    # A new class with no eval image cannot be judged: refused.
    unseen = metrics(("a", 50, 45, 50), ("b", 50, 45, 50), ("c", 0, 0, 0))
    decision = blessing.decide(unseen, added, config, [shared])
    assert "no image in the new eval split" in decision.reason


@pytest.mark.unit
def test_scores_are_matched_by_class_name_not_id():
    # The set's ids: a=0, b=1, c=2; the model's: c=0, a=1 (it does not know b).
    matrix = np.array([[0, 9], [4, 3], [5, 0]])  # [true set id, predicted model id]
    shared = scoring.shared_classes(("a", "b", "c"), ("c", "a"), ("a", "c", "d"))
    assert shared == ("a", "c")
    result = scoring.shared_metrics(("a", "b", "c"), ("c", "a"), matrix, shared)
    assert result.by_label()["a"] == ev.ClassMetrics("a", 9, 9, 9)
    assert result.by_label()["c"] == ev.ClassMetrics("c", 5, 5, 5)
    assert result.accuracy == 1.0
    # Images of a shared class predicted as a class outside them count as wrong.
    matrix = np.array([[3, 6, 0], [0, 0, 0], [0, 0, 5]])  # model: a, x, c
    result = scoring.shared_metrics(("a", "b", "c"), ("a", "x", "c"), matrix, ("a", "c"))
    assert result.by_label()["a"].correct == 3 and result.accuracy == pytest.approx(8 / 14)


@pytest.mark.unit
def test_images_of_spans_the_window_moved_past_are_left_out_of_that_comparison_only():
    from imgpipe.components.evaluator.executor import compare

    # Six images of class a: spans 5, 5, 7, 8, 9 and one that does not say (NO_SPAN).
    # Candidate right on the last four, the record holder on all six.
    found = scoring.Scored(
        np.zeros(6, np.int64),
        (np.array([1, 1, 0, 0, 0, 0]), np.zeros(6, np.int64)),
        np.array([5, 5, 7, 8, 9, scoring.NO_SPAN]),
    )
    reference = reference_sets.ReferenceSet(reference_sets.CHAMPION_REFERENCE, "/r", ("a",), ())
    counted = compare(reference, found, ["a", "b"], ("a", "b"))
    assert counted.paired.images == 6 and counted.paired.champion_only == 2
    moved_on = compare(reference, found, ["a", "b"], ("a", "b"), (5, 6), "record holder")
    assert moved_on.compared and moved_on.paired.images == 4
    assert moved_on.paired.champion_only == 0
    assert moved_on.note == (
        "left out 2 images of spans 5: admitted by an acceptance, the record holder was "
        "trained on them and the candidate's window has moved past them"
    )
    # Nothing left: skipped, said so. A set whose records carry no span is not touched.
    only_five = scoring.Scored(found.labels[:2], (found.labels[:2],) * 2, found.spans[:2])
    gone = compare(reference, only_five, ["a", "b"], ("a", "b"), (5,))
    assert not gone.compared and gone.note.startswith("skipped: left out 2 images of spans 5:")
    plain = scoring.Scored(found.labels, found.predictions)
    unchanged, left_out = scoring.without_spans(plain, (5,))
    assert unchanged is plain and left_out == {}


@pytest.mark.unit
def test_left_behind_are_the_accepted_spans_the_candidate_no_longer_trains_on(tmp_path):
    from imgpipe.components.evaluator import references

    def model(name: str, training: dict | None) -> str:
        extra = tmp_path / name / "assets.extra"
        extra.mkdir(parents=True)
        if training is not None:
            (extra / served_models.TRAINING_FILE).write_text(json.dumps(training))
        return str(tmp_path / name)

    champion = model("champion", {"spans": [9, 8, 7, 5], "accepted_spans": [5, 7]})
    assert references.left_behind(champion, model("c11", {"spans": [11, 10, 9, 8]})) == (5, 7)
    assert references.left_behind(champion, model("c10", {"spans": [10, 9, 8, 7]})) == (5,)
    # Not known: a model trained before either record was kept, or no baseline.
    assert references.left_behind(model("old", {"spans": [9, 8, 7, 5]}), champion) == ()
    assert references.left_behind(champion, model("none", None)) == ()
    assert references.left_behind(None, champion) == ()


@pytest.mark.unit
def test_evaluation_json_and_report_show_every_set_and_read_version_1(tmp_path):
    from imgpipe.components.evaluator import report

    new_split = comparison(reference_sets.NEW_SPLIT, GOOD, GOOD)
    skipped = ev.Comparison(
        reference_sets.CHAMPION_REFERENCE, "/s/1/ref", False, "skipped: <damaged>"
    )
    decision = blessing.decide(GOOD, CHAMPION, EvaluatorConfig(), [new_split, skipped])
    result = ev.Evaluation("eval", "a", 0.5, 0.55, GOOD, CHAMPION, decision, (new_split, skipped))
    ev.write(str(tmp_path), result)
    assert ev.read(str(tmp_path)) == result
    page = report.render(result)
    assert '<h1 data-blessed="1">blessed</h1>' in page
    assert "<td>new_split</td><td>0.9000 (90/100)</td><td>0.9000 (90/100)</td>" in page
    assert "skipped: &lt;damaged&gt;" in page
    # A document written before comparisons were recorded still reads.
    old = json.loads((tmp_path / ev.EVALUATION_FILE).read_text())
    old["version"] = 1
    del old["comparisons"]
    assert ev.from_json(json.dumps(old)).comparisons == ()


# --- the executor and the Pusher on photos -----------------------------------------------

SIZE = 32
PER_CLASS = 48
PHOTO_SIZE = 48


def _photo_folders(root: str) -> dict[str, str]:
    """Colour photos, the same photos in grey, and the colour photos of three classes."""
    import cv2

    from imgpipe.pipelines import sample_photos

    colour = os.path.join(root, "colour")
    sample_photos.make_dataset(colour, per_class=PER_CLASS, size=PHOTO_SIZE)
    grey = os.path.join(root, "grey")
    three = os.path.join(root, "three")
    for path in glob.glob(os.path.join(colour, "*", "*.jpg")):
        label, name = path.split(os.sep)[-2:]
        photo = cv2.imread(path, cv2.IMREAD_COLOR)
        os.makedirs(os.path.join(grey, label), exist_ok=True)
        grey_photo = cv2.cvtColor(cv2.cvtColor(photo, cv2.COLOR_BGR2GRAY), cv2.COLOR_GRAY2BGR)
        cv2.imwrite(os.path.join(grey, label, name), grey_photo)
        if label != "fruit":
            os.makedirs(os.path.join(three, label), exist_ok=True)
            cv2.imwrite(os.path.join(three, label, name), photo)
    return {"colour": colour, "grey": grey, "three": three}


def _examples(folder: str, uri: str):
    from tfx.types import artifact_utils, standard_artifacts

    examples = standard_artifacts.Examples()
    examples.uri = uri
    th.convert(folder, uri, num_shards=1)
    examples.split_names = artifact_utils.encode_split_names(["train", "eval"])
    return examples


def _spans_of(folder: str) -> dict[int, int]:
    """Images per span of a reference folder (scoring.NO_SPAN where a record has none)."""
    reference = reference_sets.read(folder)
    found = scoring.score(reference.shards, len(reference.labels), [])
    spans = found.spans if found.spans is not None else np.full(found.labels.shape, scoring.NO_SPAN)
    values, counts = np.unique(spans, return_counts=True)
    return {int(v): int(c) for v, c in zip(values, counts, strict=True)}


def _with_training(model_dir: str, folder: str, training: dict) -> str:
    """A copy of a Format-Serving folder whose record of its training is `training`,
    published as the Trainer publishes (manifest last)."""
    import shutil

    from imgpipe.components.common.storage import outputs

    def write(out: str) -> None:
        shutil.copytree(model_dir, out)
        with open(os.path.join(out, "assets.extra", served_models.TRAINING_FILE), "w") as f:
            json.dump(training, f)

    outputs.publish_folder(folder, "Format-Serving", write)
    return os.path.join(folder, "Format-Serving")


def _by_name(result: ev.Evaluation) -> dict[str, ev.Comparison]:
    return {c.name: c for c in result.comparisons}


@pytest.mark.component
def test_grey_photos_are_not_blessed_over_a_colour_champion(tmp_path):
    from imgpipe.components.pusher.executor import publish, reference_files

    folders = _photo_folders(str(tmp_path / "photos"))
    labels = tuple(sorted(os.listdir(folders["colour"])))
    colour = _examples(folders["colour"], str(tmp_path / "colour-examples"))
    grey = _examples(folders["grey"], str(tmp_path / "grey-examples"))
    colour.span, grey.span = 1, 2
    serving = str(tmp_path / "serving")
    champion = th.trained_photo_model(
        folders["colour"],
        labels,
        str(tmp_path / "colour-model" / "Format-Serving"),
        SIZE,
        training={"spans": [1]},
    )
    candidate = th.trained_photo_model(
        folders["grey"],
        labels,
        str(tmp_path / "grey-model" / "Format-Serving"),
        SIZE,
        training={"spans": [2, 1]},
    )

    first, blessed = th.evaluate(tmp_path, "first", colour, champion, serving)
    assert first.decision.blessed, first.decision.reason
    assert first.champion.status == ev.NO_CHAMPION
    first_blessing = blessed.uri
    pushed = publish(champion, serving, extras=reference_files(first_blessing))
    # The push keeps the eval split it was blessed on, each image with its span.
    kept = reference_sets.read(os.path.join(pushed, served_models.REFERENCE_ASSET))
    assert kept.labels == labels
    assert served_models.latest(serving).reference_dir == kept.uri
    eval_images = first.candidate.examples
    assert _spans_of(kept.uri) == {1: eval_images}

    result, blessed = th.evaluate(tmp_path, "grey", grey, candidate, serving)
    compared = _by_name(result)
    new_split = compared[reference_sets.NEW_SPLIT]
    reference = compared[reference_sets.CHAMPION_REFERENCE]
    assert reference.compared and reference.uri == kept.uri
    # On grey photos the colour champion looks weak; on its colour photos it is not.
    assert new_split.champion.accuracy < reference.champion.accuracy
    assert reference.candidate.accuracy < reference.champion.accuracy - 0.01
    assert not result.decision.blessed
    assert blessed.get_int_custom_property("blessed") == 0
    failed = [c.name for c in result.decision.checks if not c.passed]
    assert any(name.endswith(":champion_reference") for name in failed), failed
    assert not os.path.exists(os.path.join(blessed.uri, reference_sets.REFERENCE_DIR))

    # The same grey model, its window moved past span 1 (trained on span 2 alone): span 1
    # passed its gates on its own, so losing what it taught is a loss, and still refused.
    moved_on = _with_training(candidate, str(tmp_path / "moved-on-model"), {"spans": [2]})
    result, _ = th.evaluate(tmp_path, "moved-on", grey, moved_on, serving)
    assert _by_name(result)[reference_sets.CHAMPION_REFERENCE].compared
    assert not result.decision.blessed

    # The same grey photos as the golden set: scored too (and the candidate is fine there).
    golden, _ = th.evaluate(tmp_path, "golden", grey, candidate, serving, golden_examples=grey.uri)
    assert _by_name(golden)[reference_sets.GOLDEN].compared

    # A damaged reference set damages its push: the champion is passed over, the file
    # named, and the candidate is judged on its own floor; the run does not crash.
    (shard,) = glob.glob(os.path.join(kept.uri, "data_tfrecord-*"))
    with open(shard, "r+b") as f:
        f.seek(20)
        f.write(b"\xff\xff\xff\xff")
    result, _ = th.evaluate(tmp_path, "damaged", colour, champion, serving)
    assert result.champion.status == ev.UNREADABLE
    assert "damaged (assets.extra/reference/data_tfrecord-" in result.champion.note
    assert reference_sets.CHAMPION_REFERENCE not in _by_name(result)
    assert result.decision.blessed and "floor alone" in result.decision.reason
    # A missing golden set: skipped, said so.
    result, _ = th.evaluate(
        tmp_path, "nogolden", colour, champion, serving, golden_examples=str(tmp_path / "none")
    )
    assert "unreadable" in _by_name(result)[reference_sets.GOLDEN].note

    # A champion trained on span 1 when span 1 passed its gates only by an acceptance:
    # once the window has moved past it, its images would refuse every later candidate
    # (the schedule frozen). They are left out, said so; the candidate is blessed on the
    # rest, and its reference set grows with each image's span.
    accepted = _with_training(
        champion, str(tmp_path / "accepted-model"), {"spans": [1], "accepted_spans": [1]}
    )
    publish(accepted, serving, extras=reference_files(first_blessing))
    result, blessed = th.evaluate(tmp_path, "moved-past-accepted", grey, moved_on, serving)
    reference = _by_name(result)[reference_sets.CHAMPION_REFERENCE]
    assert not reference.compared
    assert reference.note == (
        f"skipped: left out {eval_images} images of spans 1: admitted by an acceptance, the "
        "champion was trained on them and the candidate's window has moved past them"
    )
    assert result.decision.blessed, result.decision.reason
    grown = os.path.join(blessed.uri, reference_sets.REFERENCE_DIR)
    assert _spans_of(grown) == {2: result.candidate.examples, 1: eval_images}


@pytest.mark.component
def test_a_class_added_is_judged_on_the_shared_classes(tmp_path):
    from imgpipe.components.pusher.executor import publish, reference_files

    folders = _photo_folders(str(tmp_path / "photos"))
    four = tuple(sorted(os.listdir(folders["colour"])))
    three = tuple(sorted(os.listdir(folders["three"])))
    serving = str(tmp_path / "serving")
    champion = th.trained_photo_model(
        folders["three"], three, str(tmp_path / "three-model" / "Format-Serving"), SIZE
    )
    first, blessed = th.evaluate(
        tmp_path, "first", _examples(folders["three"], str(tmp_path / "e3")), champion, serving
    )
    assert first.decision.blessed, first.decision.reason
    publish(champion, serving, extras=reference_files(blessed.uri))

    four_examples = _examples(folders["colour"], str(tmp_path / "e4"))
    candidate = th.trained_photo_model(
        folders["colour"], four, str(tmp_path / "four-model" / "Format-Serving"), SIZE
    )
    result, _ = th.evaluate(tmp_path, "added", four_examples, candidate, serving)
    assert result.champion.status == ev.COMPARED
    assert result.champion.classes_added == ("fruit",)
    for name in (reference_sets.NEW_SPLIT, reference_sets.CHAMPION_REFERENCE):
        assert _by_name(result)[name].compared
        assert _by_name(result)[name].classes == three
    assert "new_class:fruit" in {c.name for c in result.decision.checks}
    # A floor the new class cannot reach refuses the model, naming the class.
    result, _ = th.evaluate(
        tmp_path, "strict", four_examples, candidate, serving, new_class_min_recall=1.0
    )
    fruit = next(c for c in result.decision.checks if c.name == "new_class:fruit")
    recall = result.candidate.by_label()["fruit"].recall
    assert fruit.passed == (recall == 1.0)
    assert "new class 'fruit': recall" in fruit.detail
    assert fruit.passed or not result.decision.blessed
