"""The year bench's schedule and target judging (benchmarks/year_schedule.py)."""

from __future__ import annotations

import json

import pytest

from benchmarks import year_schedule as ys

pytestmark = pytest.mark.unit


def test_a_full_year_places_each_event_where_the_issue_says():
    spans = ys.schedule(52, per_class=15)
    assert [s.span for s in spans] == list(range(1, 53))
    events = {s.span: s.event for s in spans if s.event != ys.NORMAL}
    assert events == {
        10: ys.CLASS_ADDED,
        12: ys.KILLED,
        13: ys.ROLLBACK,
        15: ys.GREY,
        16: "colour back",
        20: ys.MISLABELLED,
        25: ys.NEW_CAMERA,
        30: ys.CLASS_ADDED,
        **{s: ys.MORE_DATA for s in range(35, 41)},
        45: ys.MISSED_DAY,
        46: ys.CATCH_UP,
    }
    by = {s.span: s for s in spans}
    assert by[1].classes == ys.FIRST_CLASSES
    assert len(by[9].classes) == 3 and len(by[10].classes) == 4 and len(by[30].classes) == 5
    assert by[52].classes == (*ys.FIRST_CLASSES, *ys.ADDED_CLASSES)
    # The new camera stays: another size from span 25 on.
    assert {s.size for s in spans if s.span < 25} == {ys.OLD_SIZE}
    assert all(s.new_camera and s.size == ys.NEW_SIZE for s in spans if s.span >= 25)
    assert by[35].per_class == 45 and by[41].per_class == 15
    # Only the missed day goes without a run; only the mislabelled span is unclean and
    # not accepted by the operator.
    assert [s.span for s in spans if not s.runs] == [45]
    assert [s.span for s in spans if not s.clean] == [20]
    assert not by[20].intended and by[15].intended and by[25].intended and by[10].intended


def test_a_short_run_takes_the_events_in_order_from_span_two():
    spans = ys.schedule(8, per_class=10)
    assert [s.event for s in spans] == [
        ys.NORMAL,
        ys.CLASS_ADDED,
        ys.KILLED,
        ys.ROLLBACK,
        ys.GREY,
        ys.MISLABELLED,
        ys.NEW_CAMERA,
        ys.CLASS_ADDED,
    ]
    assert len(spans[-1].classes) == 5
    # A missed day on the last span would never be caught up: it runs as a normal day.
    assert all(s.runs for s in ys.schedule(10, per_class=10))
    assert [s.runs for s in ys.schedule(11, per_class=10)][-2:] == [False, True]


def test_the_schedule_refuses_nonsense():
    with pytest.raises(ValueError, match="1 or more"):
        ys.schedule(0, per_class=10)


def _row(span, served, oracle, worse=0, disk=100, seconds=10.0):
    return {
        "span": span,
        "served_accuracy": served,
        "oracle_accuracy": oracle,
        "worse_than_record": worse,
        "disk_bytes": disk,
        "seconds": seconds,
    }


def test_judging_the_targets():
    rows = [_row(s, 0.5 if s <= 4 else 0.9, 0.92) for s in range(1, 53)]
    rows[7] = _row(8, 0.9, 0.92, disk=100, seconds=10.0)
    rows[51] = _row(52, 0.9, 0.92, disk=119, seconds=13.0)
    targets = ys.judge(rows)
    # Far from the oracle in the first four spans is allowed.
    assert targets["within_3_points_of_oracle"]["met"] is True
    assert targets["within_3_points_of_oracle"]["spans_judged"] == 48
    assert targets["no_push_significantly_worse_than_record"]["met"] is True
    assert targets["disk_growth"] == {
        "met": True,
        "early_span": 8,
        "late_span": 52,
        "ratio": 1.19,
        "limit": 1.2,
    }
    assert targets["run_time_growth"]["met"] is False
    assert targets["run_time_growth"]["ratio"] == 1.3
    # With each span's data measured, the disk is also given in units of it.
    rows[7]["span_data_bytes"], rows[51]["span_data_bytes"] = 10, 20
    assert ys.judge(rows)["disk_growth"]["ratio_per_span_data"] == 0.595

    rows[20] = _row(21, 0.85, 0.92, worse=1)
    missed = ys.judge(rows)
    assert missed["within_3_points_of_oracle"]["met"] is False
    assert missed["within_3_points_of_oracle"]["spans_beyond"] == [{"span": 21, "gap_points": 7.0}]
    assert missed["no_push_significantly_worse_than_record"] == {"met": False, "pushes": 1}


def test_the_longest_run_of_spans_without_a_push_shows_a_freeze():
    def row(span: int, *decisions: tuple[str, int]) -> dict:
        return {"span": span, "decisions": [{"kind": k, "span": s} for k, s in decisions]}

    rows = [row(1, ("pushed", 1)), row(2, ("stopped", 2)), row(3, ("pushed", 3))]
    rows += [row(4), row(5, ("pushed", 4), ("pushed", 5))]  # a missed day, caught up
    assert ys.longest_without_push(rows) == {"spans": 1, "first": 2, "last": 2}
    rows += [row(s, ("refused", s)) for s in range(6, 17)]
    assert ys.longest_without_push(rows) == {"spans": 11, "first": 6, "last": 16}
    assert ys.longest_without_push(rows[:1]) == {"spans": 0, "first": None, "last": None}


def test_a_short_run_judges_what_it_can():
    targets = ys.judge([_row(s, None if s == 1 else 0.9, 0.9) for s in range(1, 7)])
    assert targets["within_3_points_of_oracle"]["met"] is True
    assert targets["disk_growth"]["met"] is None
    assert targets["run_time_growth"]["late_span"] == 6


def test_a_year_cut_short_resumes_after_its_last_row(tmp_path):
    from benchmarks import year_bench

    def kept(span, served, decisions):
        return {"span": span, "served_version": served, "decisions": [{}] * decisions}

    rows = [kept(1, None, 1), kept(2, 7, 1), kept(3, 7, 0), kept(4, 9, 2), kept(5, 7, 1)]
    (tmp_path / year_bench.ROWS_FILE).write_text("".join(json.dumps(r) + "\n" for r in rows))
    assert year_bench.rows_so_far(str(tmp_path)) == rows

    year = year_bench.Year(str(tmp_path))
    year.resume(year_bench.rows_so_far(str(tmp_path)))
    copies = tmp_path / "bench-served"
    # Each change of the served model once, in turn: a rollback to 7 is a change too.
    assert year.served_before == [str(copies / "7"), str(copies / "9"), str(copies / "7")]
    assert year.decisions_seen == 5
    assert year_bench.rows_so_far(str(tmp_path / "new")) == []
