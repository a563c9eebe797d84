"""The year bench's pure parts: which span brings what, and whether the targets are met.

`schedule(n)` says for each of n spans its classes, images per class, camera and event;
`judge(rows)` holds the per-span measurements to issue 44 item 7's targets. No I/O, no
TensorFlow: tests/test_year_bench.py checks both.
"""

from __future__ import annotations

import dataclasses
import math

# Class -> RGB centre; the first three are there from the first span.
COLOURS = {
    "red": (200, 40, 40),
    "green": (40, 180, 60),
    "blue": (40, 60, 200),
    "yellow": (200, 190, 40),
    "purple": (150, 40, 170),
}
FIRST_CLASSES = ("red", "green", "blue")
ADDED_CLASSES = ("yellow", "purple")

NORMAL = "normal"
CLASS_ADDED = "class added"
GREY = "grey"
MISLABELLED = "mislabelled"
NEW_CAMERA = "new camera"
MORE_DATA = "more data"
MISSED_DAY = "missed day"  # the span lands, no run follows; the next run catches it up
CATCH_UP = "catch-up"
# Faults of a year: the run is killed (SIGKILL, as a node lost) once its Trainer starts,
# and the scheduler's next firing reruns it; the span's push is rolled back by the person
# on call (`imgpipe rollback`), and the next span's candidate meets the model served again.
KILLED = "killed"
ROLLBACK = "rollback"
# What the operator means to happen, and so accepts when a gate stops it. The span after
# the grey one is the camera back in colour: meant too.
INTENDED = (CLASS_ADDED, GREY, NEW_CAMERA, MORE_DATA, "colour back")
# Where the events fall in a full year (>= FULL spans); shorter runs take them in this
# order from span 2 on, as many as fit.
FULL = 46
YEAR_EVENTS = (
    (10, CLASS_ADDED),
    (12, KILLED),
    (13, ROLLBACK),
    (15, GREY),
    (20, MISLABELLED),
    (25, NEW_CAMERA),
    (30, CLASS_ADDED),
    (35, MORE_DATA),
    (45, MISSED_DAY),
)
MORE_DATA_SPANS = 6  # 35..40 in a full year
MORE_DATA_FACTOR = 3
OLD_SIZE, NEW_SIZE = 48, 72
NEW_CAST = (30, 0, -30)  # the new camera's colour cast, added to every pixel (RGB)
MISLABELLED_FRACTION = 0.4


@dataclasses.dataclass(frozen=True)
class Span:
    """One span of the year.

    Attributes:
      span: its number, from 1.
      classes: the classes it holds (the world's classes on that day).
      per_class: images per class.
      size: the camera's image side in pixels.
      new_camera: taken with the new camera (NEW_SIZE, NEW_CAST).
      event: NORMAL or one of the events above.
      runs: a run follows its landing (False on a missed day).
    """

    span: int
    classes: tuple[str, ...]
    per_class: int
    size: int
    new_camera: bool
    event: str
    runs: bool = True

    @property
    def grey(self) -> bool:
        return self.event == GREY

    @property
    def mislabelled(self) -> bool:
        return self.event == MISLABELLED

    @property
    def clean(self) -> bool:
        """Labels as they should be: the oracle trains on it."""
        return not self.mislabelled

    @property
    def intended(self) -> bool:
        return self.event in INTENDED


def event_spans(n: int) -> dict[int, str]:
    """Span -> event for a run of n spans; MORE_DATA covers a range of spans."""
    if n >= FULL:
        placed = dict(YEAR_EVENTS)
        more = next(s for s, e in YEAR_EVENTS if e == MORE_DATA)
        for s in range(more, more + MORE_DATA_SPANS):
            placed.setdefault(s, MORE_DATA)
    else:
        placed = {2 + i: event for i, (_, event) in enumerate(YEAR_EVENTS) if 2 + i <= n}
    # A missed day needs a run after it to catch it up.
    return {s: e for s, e in placed.items() if not (e == MISSED_DAY and s >= n)}


def schedule(n: int, per_class: int) -> list[Span]:
    """The n spans of the year, in order.

    Raises:
      ValueError: n or per_class below 1.
    """
    if n < 1 or per_class < 1:
        raise ValueError(f"spans and per_class must be 1 or more, got {n} and {per_class}")
    events = event_spans(n)
    classes = FIRST_CLASSES
    added = list(ADDED_CLASSES)
    new_camera = False
    spans: list[Span] = []
    for number in range(1, n + 1):
        event = events.get(number, NORMAL)
        if event == CLASS_ADDED and added:
            classes = (*classes, added.pop(0))
        new_camera = new_camera or event == NEW_CAMERA
        if event == NORMAL and spans and spans[-1].event == GREY:
            event = "colour back"
        if event == NORMAL and spans and spans[-1].event == MISSED_DAY:
            event = CATCH_UP
        size = NEW_SIZE if new_camera else OLD_SIZE
        count = per_class * (MORE_DATA_FACTOR if event == MORE_DATA else 1)
        spans.append(
            Span(number, classes, count, size, new_camera, event, runs=event != MISSED_DAY)
        )
    return spans


# The targets of issue 44 item 7.
WARM_UP_SPANS = 4
ORACLE_MARGIN = 0.03
GROWTH_LIMIT = 1.2
EARLY_SPAN, LATE_SPAN = 8, 52


def judge(rows: list[dict]) -> dict:
    """Holds the per-span rows to the targets.

    Each row has: span, served_accuracy, oracle_accuracy (None before any model),
    worse_than_record (pushes significantly worse than the record so far), disk_bytes,
    seconds (None where no run followed). Disk and time compare span 52 with span 8, or
    the last span with span 8 on a shorter run (said in the figure), and are not judged
    with fewer than 8 spans.
    """
    after = [r for r in rows if r["span"] > WARM_UP_SPANS and r["oracle_accuracy"] is not None]
    gaps = [
        (r["span"], r["oracle_accuracy"] - (r["served_accuracy"] or 0.0))
        for r in after
        if r["oracle_accuracy"] - (r["served_accuracy"] or 0.0) > ORACLE_MARGIN + 1e-9
    ]
    targets = {
        "within_3_points_of_oracle": {
            "met": not gaps if after else None,
            "spans_judged": len(after),
            "spans_beyond": [{"span": s, "gap_points": round(100 * g, 1)} for s, g in gaps],
        },
        "no_push_significantly_worse_than_record": {
            "met": not any(r.get("worse_than_record") for r in rows),
            "pushes": sum(int(r.get("worse_than_record") or 0) for r in rows),
        },
    }
    by_span = {r["span"]: r for r in rows}
    late_span = LATE_SPAN if LATE_SPAN in by_span else max(by_span, default=0)
    for name, key in (("disk", "disk_bytes"), ("run_time", "seconds")):
        early, late = by_span.get(EARLY_SPAN, {}).get(key), by_span.get(late_span, {}).get(key)
        ratio = late / early if early and late is not None and late_span > EARLY_SPAN else None
        targets[f"{name}_growth"] = {
            "met": None if ratio is None else ratio <= GROWTH_LIMIT,
            "early_span": EARLY_SPAN,
            "late_span": late_span,
            "ratio": None if ratio is None or math.isnan(ratio) else round(ratio, 3),
            "limit": GROWTH_LIMIT,
        }
    # Not a target: the disk in units of a span's data, which the schedule itself grows
    # (classes added, the new camera's larger photos, more data); flat means the disk
    # follows the data, not the number of spans.
    early_data = by_span.get(EARLY_SPAN, {}).get("span_data_bytes")
    late_data = by_span.get(late_span, {}).get("span_data_bytes")
    disk_ratio = targets["disk_growth"]["ratio"]
    if early_data and late_data and disk_ratio is not None:
        targets["disk_growth"]["ratio_per_span_data"] = round(
            disk_ratio * early_data / late_data, 3
        )
    return targets


def longest_without_push(rows: list[dict]) -> dict:
    """The longest run of consecutive spans none of which was pushed, by any run: a
    schedule that freezes shows here before it shows in accuracy (on the bench's easy
    photos the served model can stay at the oracle's level for many spans).

    Each row's `decisions` are the serving history's records of its runs ({"kind",
    "span"}); a span with no run of its own (a missed day) counts as pushed when the run
    that took it pushed it. Returns {"spans": n, "first": span, "last": span}, n 0 (and
    None, None) when every span was pushed.
    """
    pushed = {
        d.get("span") for r in rows for d in r.get("decisions") or [] if d.get("kind") == "pushed"
    }
    longest: dict = {"spans": 0, "first": None, "last": None}
    start = None
    for span in sorted(r["span"] for r in rows):
        if span in pushed:
            start = None
            continue
        start = span if start is None else start
        if span - start + 1 > longest["spans"]:
            longest = {"spans": span - start + 1, "first": start, "last": span}
    return longest
