"""Training on a window of spans (components/trainer/window.py, components/common/formats/
spans.py): which spans a run reads, the label ids of earlier spans mapped by name, spans
left out said so, and the Trainer reading them all."""

from __future__ import annotations

import os
import shutil

import numpy as np
import pytest

from imgpipe.components.common.formats import spans
from imgpipe.components.common.formats.spans import AdmittedSpan
from imgpipe.components.trainer import window
from tests import trainer_helpers as th


def admitted(span: int, labels=("a", "b")) -> AdmittedSpan:
    return AdmittedSpan(span, f"/examples/{span}", tuple(labels))


@pytest.mark.unit
def test_the_window_is_the_newest_admitted_spans_before_this_one():
    found = [admitted(1), admitted(2), admitted(4), admitted(7)]
    chosen = window.choose(found, 5, ["a", "b"], 3, lambda uri: "")
    assert chosen.spans == (5, 4, 2) and chosen.note == ""
    assert [s.span for s, remap in chosen.earlier] == [4, 2]
    assert all(remap is None for _, remap in chosen.earlier)
    assert window.choose(found, 5, ["a", "b"], 0, lambda uri: "").spans == (5, 4, 2, 1)
    assert window.choose(found, 5, ["a", "b"], 1, lambda uri: "").spans == (5,)
    assert window.choose(found, None, ["a", "b"], 4, lambda uri: "").spans == (None,)
    assert window.describe(window.choose(found, 5, ["a", "b"], 2, lambda uri: "")) == "spans 5, 4"


@pytest.mark.unit
def test_a_span_left_out_is_replaced_by_an_older_one_so_the_window_keeps_its_size():
    found = [admitted(1), admitted(2), admitted(3), admitted(4)]
    gone = {"/examples/3": "its examples /examples/3 are gone (deleted)"}
    chosen = window.choose(found, 5, ["a", "b"], 3, lambda uri: gone.get(uri, ""))
    assert chosen.spans == (5, 4, 2)
    assert chosen.note == "left out span 3: its examples /examples/3 are gone (deleted)"


@pytest.mark.unit
def test_earlier_spans_are_mapped_by_class_name_or_left_out_with_why():
    found = [admitted(1, ("a", "c")), admitted(2, ("a", "x")), admitted(3, ("a", "b", "c"))]
    gone = {"/examples/3": "its examples /examples/3 cannot be read (no manifest)"}
    chosen = window.choose(found, 4, ["a", "b", "c"], 0, lambda uri: gone.get(uri, ""))
    assert chosen.spans == (4, 1)
    assert chosen.earlier[0][1] == (0, 2)  # span 1's a=0, c=1 are the model's 0 and 2
    assert chosen.note == (
        "left out span 3: its examples /examples/3 cannot be read (no manifest); "
        "span 2: it has classes ['x'] this span does not"
    )
    assert window.describe(chosen).startswith("spans 4, 1 (left out span 3: ")


@pytest.mark.unit
def test_admitted_spans_are_recorded_beside_the_champion_and_withdrawn(tmp_path):
    serving = str(tmp_path / "serving")
    spans.admit(serving, 2, "/e/2", ("a", "b"))
    spans.admit(serving, 3, "/e/3", ("a", "b", "c"))
    spans.admit(serving, 2, "/e/2-again", ("a", "b"))  # a rerun of span 2 replaces it
    assert [(s.span, s.examples_uri) for s in spans.admitted(serving)] == [
        (3, "/e/3"),
        (2, "/e/2-again"),
    ]
    spans.withdraw(serving, 3)
    assert [s.span for s in spans.admitted(serving)] == [2]
    assert os.listdir(serving) == [".spans"]  # nothing a model server would list
    (tmp_path / "serving" / ".spans" / "span-9.json").write_text("{")
    assert [s.span for s in spans.admitted(serving)] == [2]


@pytest.mark.component
def test_the_trainer_reads_every_span_of_the_window_with_labels_by_name(tmp_path):
    from imgpipe.components.trainer import input as input_lib
    from imgpipe.components.trainer.memory import MemoryPlan

    # Span 1 has two classes, span 2 adds a third (written as id 0: "blue" sorts first).
    first = th.make_class_folder(str(tmp_path / "one"), per_class=6)
    shutil.rmtree(os.path.join(first, "blue"))
    one, two = str(tmp_path / "one-examples"), str(tmp_path / "two-examples")
    th.convert(first, one, num_shards=1)
    th.convert(th.make_class_folder(str(tmp_path / "two"), per_class=6), two, num_shards=1)
    labels = list(th.CLASSES)
    chosen = window.choose([AdmittedSpan(1, one, ("red", "stripes"))], 2, labels, 2, lambda uri: "")
    assert chosen.earlier[0][1] == (1, 2)
    source = input_lib.combine(
        [input_lib.split_source(two, "train"), input_lib.split_source(one, "train")],
        [None, chosen.earlier[0][1]],
        len(labels),
    )
    memory = MemoryPlan(False, 8, 1 << 26, 1 << 26, "test")

    def read(source) -> np.ndarray:
        dataset = input_lib.make_dataset(
            source, input_lib.EVAL, image_size=16, batch_size=8, memory=memory
        )
        return np.concatenate([batch.numpy() for _, batch in dataset])

    seen = read(source)
    assert len(seen) == source.records
    # Span 1's images are red (its id 0) and stripes (its id 1): the model's 1 and 2.
    expected = np.bincount(read(input_lib.split_source(two, "train")), minlength=3)
    expected += np.bincount(
        np.array([1, 2])[read(input_lib.split_source(one, "train"))], minlength=3
    )
    np.testing.assert_array_equal(np.bincount(seen, minlength=3), expected)
    assert expected[0] > 0 and expected[1] > expected[0]


@pytest.mark.unit
def test_a_span_let_through_by_an_acceptance_waits_for_a_push_trained_on_it():
    grey = AdmittedSpan(3, "/examples/3", ("a", "b"), accepted=True)
    found = [admitted(1), admitted(2), grey]
    chosen = window.choose(found, 4, ["a", "b"], 0, lambda uri: "")
    assert chosen.spans == (4, 2, 1)
    assert chosen.note == (
        "left out span 3: passed its gates by an acceptance, and no model trained on it has "
        "been pushed"
    )
    assert chosen.accepted == ()
    # Once a model trained on it is served, it is trained on; the window still names it as
    # accepted (the model records it: training.json `accepted_spans`), and this run's own
    # span when an acceptance let it through.
    served = window.choose(found, 4, ["a", "b"], 0, lambda uri: "", served=[3, 2])
    assert served.spans == (4, 3, 2, 1) and served.accepted == (3,)
    own = window.choose(found, 4, ["a", "b"], 0, lambda uri: "", [3], span_accepted=True)
    assert own.accepted == (3, 4)
    alone = window.choose(found, 4, ["a", "b"], 1, lambda uri: "", span_accepted=True)
    assert alone.spans == (4,) and alone.accepted == (4,)


@pytest.mark.unit
def test_a_damaged_span_record_admits_nothing_and_is_named(tmp_path):
    serving = str(tmp_path / "serving")
    spans.admit(serving, 1, "/examples/1", ("a", "b"))
    record = spans.admit(serving, 2, "/examples/2", ("a", "b"))
    with open(record, "r+b") as f:  # truncated to half, as a full disk leaves it
        f.truncate(os.path.getsize(record) // 2)
    problems: list[str] = []
    assert [s.span for s in spans.admitted(serving, problems)] == [1]
    assert len(problems) == 1 and problems[0].startswith(f"{record}: ")
