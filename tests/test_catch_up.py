"""Every span that lands is used (pipelines/cli/catch_up.py): a run reads each span landed
since the last one a run of the serving folder saw, oldest first, names a span it leaves
with the flag that takes it in, and names the span numbers missing."""

from __future__ import annotations

import os
import shutil

import pytest

from imgpipe.components.common.formats import serving_history, spans
from imgpipe.pipelines import config as cfg
from imgpipe.pipelines import pipeline as pl
from imgpipe.pipelines.cli import catch_up

pytestmark = pytest.mark.unit


def landed(tmp_path, *numbers: int) -> str:
    for number in numbers:
        os.makedirs(tmp_path / "data" / f"span-{number}" / "a")
    os.makedirs(tmp_path / "data" / "span-x")  # a stray folder is no span
    return str(tmp_path / "data" / "span-{SPAN}")


def seen(tmp_path, admitted=(), stopped=(), failed=()) -> str:
    serving = str(tmp_path / "serving")
    for span in admitted:
        spans.admit(serving, span, f"/root/examples/{span}", ("a", "b"))
    for kind, numbers in ((serving_history.STOPPED, stopped), (serving_history.FAILED, failed)):
        for span in numbers:
            serving_history.record(
                serving, serving_history.Decision(time=span, kind=kind, span=span)
            )
    return serving


def test_spans_that_landed_together_are_each_run_in_turn(tmp_path):
    plan = catch_up.plan(landed(tmp_path, 1, 2, 3, 4), seen(tmp_path, admitted=[1]), None)
    assert plan.spans == (2, 3, 4)
    assert plan.notes == (
        "spans landed since span 1, the last a run saw: 2, 3, 4; each is run in turn",
    )


def test_a_span_stopped_at_a_gate_counts_as_seen_and_the_next_run_goes_on(tmp_path):
    plan = catch_up.plan(landed(tmp_path, 1, 2, 3), seen(tmp_path, admitted=[1], stopped=[2]), None)
    assert plan.spans == (3,) and plan.notes == ()


def test_a_span_whose_run_failed_is_read_again(tmp_path):
    plan = catch_up.plan(landed(tmp_path, 1, 2, 3), seen(tmp_path, admitted=[1], failed=[2]), None)
    assert plan.spans == (2, 3) and plan.notes[0].startswith("spans landed since span 1")


def test_a_missing_span_number_and_a_span_left_behind_are_named(tmp_path):
    plan = catch_up.plan(landed(tmp_path, 1, 2, 3, 4, 6), seen(tmp_path, admitted=[1, 3, 4]), None)
    assert plan.spans == (6,)
    assert plan.notes == (
        "span 2 landed after span 4 was run and is not read; take it in with: "
        "imgpipe run local --span 2 ...",
        "span 5 missing: no folder holds it",
    )


def test_a_first_run_reads_the_newest_and_a_named_span_is_read_alone(tmp_path):
    data = landed(tmp_path, 1, 2, 3)
    assert catch_up.plan(data, seen(tmp_path), None) == catch_up.SpanPlan((None,))
    assert catch_up.plan(data, seen(tmp_path, admitted=[3]), 2).spans == (2,)
    assert catch_up.plan(str(tmp_path / "data"), "", None).spans == (None,)


def read_as_it_is(data: str, span: int) -> str:
    """The fingerprint a run that read span `span` now would have kept."""
    from imgpipe.components.image_example_gen import span_fingerprint, split_input_base

    return span_fingerprint(*split_input_base(data), span)


def add_photo(tmp_path, span: int, name: str) -> None:
    (tmp_path / "data" / f"span-{span}" / "a" / name).write_bytes(b"\xff\xd8 a photo")


def test_the_last_span_read_is_read_again_first_when_its_folder_changed_since(tmp_path):
    """A span still landing when a run read it: its other files came later, with the next
    span. Without the check the next run reads the new span only, and the rest of the
    last one is never read."""
    data = landed(tmp_path, 1, 2)
    add_photo(tmp_path, 2, "1.jpg")
    serving = str(tmp_path / "serving")
    spans.admit(serving, 1, "/root/examples/1", ("a",), input_fingerprint=read_as_it_is(data, 1))
    spans.admit(serving, 2, "/root/examples/2", ("a",), input_fingerprint=read_as_it_is(data, 2))
    assert catch_up.plan(data, serving, None) == catch_up.SpanPlan((None,))

    add_photo(tmp_path, 2, "2.jpg")
    add_photo(tmp_path, 2, "3.jpg")
    os.makedirs(tmp_path / "data" / "span-3" / "a")
    plan = catch_up.plan(data, serving, None)
    assert plan.spans == (2, 3)
    assert plan.notes == (
        "span 2 changed after a run read it (1 files then, 3 now: still landing when it was "
        "read, or replaced since); it is read again, first",
    )
    # Read from another mount of the same files: no change.
    moved = str(tmp_path / "moved")
    os.rename(tmp_path / "data", moved)
    spans.admit(
        serving,
        2,
        "/root/examples/2",
        ("a",),
        input_fingerprint=read_as_it_is(data.replace(str(tmp_path / "data"), moved), 2),
    )
    os.rename(moved, tmp_path / "data")
    assert catch_up.plan(data, serving, None).spans == (3,)


def test_a_stopped_span_whose_folder_changed_is_read_again_and_old_records_are_not(tmp_path):
    data = landed(tmp_path, 1, 2)
    add_photo(tmp_path, 1, "1.jpg")
    serving = seen(tmp_path)
    serving_history.record(
        serving,
        serving_history.Decision(
            time=1, kind=serving_history.STOPPED, span=1, input_fingerprint=read_as_it_is(data, 1)
        ),
    )
    add_photo(tmp_path, 1, "2.jpg")
    assert catch_up.plan(data, serving, None).spans == (1, 2)
    # A record from before fingerprints were kept, and a span folder gone since, read as
    # they always were.
    old = seen(tmp_path / "old", admitted=[1])
    assert catch_up.plan(data, old, None).spans == (2,)
    spans.admit(old, 1, "/root/examples/1", ("a",), input_fingerprint=read_as_it_is(data, 1))
    shutil.rmtree(tmp_path / "data" / "span-1")
    assert catch_up.plan(data, old, None).spans == (2,)


def test_a_span_becomes_tfxs_static_range_of_the_conversion(tmp_path):
    config = cfg.from_dict({"data_root": str(tmp_path / "span-{SPAN}"), "span": 7})
    [example_gen] = [c for c in pl.create_components(config) if c.id == "ImageExampleGen"]
    assert '"start_span_number": 7' in example_gen.exec_properties["range_config"]
    assert '"end_span_number": 7' in example_gen.exec_properties["range_config"]
