"""`imgpipe history`'s two views of a serving folder's decisions (serving_history.py):
the text table, and a self-contained HTML page whose inline SVG draws the served model's
accuracy on the reference set, decision by decision. Pure: decisions in, text out.

The page has no script and loads nothing: a browser shows it from a file, offline.
"""

from __future__ import annotations

import datetime
import html
from collections.abc import Callable, Sequence

from imgpipe.components.common.formats import serving_history as history

HEADER = ("span", "time (UTC)", "decision", "version", "served", "ref.acc", "reason")
_WIDTHS = (6, 17, 9, 11, 11, 7)
_NONE = "-"
# A chart position from a decision's index (x), or from an accuracy (y; None: not known).
XScale = Callable[[int], float]
YScale = Callable[[float | None], float]

# The chart's frame, in SVG units.
_WIDTH, _HEIGHT = 760, 320
_LEFT, _RIGHT, _TOP, _BOTTOM = 56, 24, 16, 72
# Below the axis: decisions whose served accuracy is not known.
_UNKNOWN_BAND = 28
_COLOURS = {
    history.PUSHED: "#2e7d32",
    history.REFUSED: "#c62828",
    history.STOPPED: "#ef6c00",
    history.ROLLBACK: "#1565c0",
    history.FAILED: "#424242",
}
_LEGEND = {
    history.PUSHED: "pushed",
    history.REFUSED: "refused (nothing pushed)",
    history.STOPPED: "stopped by the data gate",
    history.ROLLBACK: "rolled back",
    history.FAILED: "failed (nothing decided)",
}


def _shown(value: object) -> str:
    return _NONE if value is None else str(value)


def cells(decision: history.Decision) -> tuple[str, ...]:
    """One decision as the table's cells, in HEADER's order."""
    moment = datetime.datetime.fromtimestamp(decision.time, datetime.timezone.utc)
    accuracy = decision.reference_accuracy
    return (
        _shown(decision.span),
        moment.strftime("%Y-%m-%dT%H:%MZ"),
        decision.kind,
        _shown(decision.model_version),
        _shown(decision.served_version),
        _NONE if accuracy is None else f"{accuracy:.4f}",
        decision.reason,
    )


def _line(values: Sequence[str]) -> str:
    padded = [value.ljust(width) for value, width in zip(values, _WIDTHS, strict=False)]
    return "  ".join([*padded, values[-1]]).rstrip()


def header() -> str:
    return _line(HEADER)


def line(decision: history.Decision) -> str:
    """One decision on one line, under `header()`."""
    return _line(cells(decision))


def served_accuracies(decisions: Sequence[history.Decision]) -> list[float | None]:
    """The served model's accuracy on the reference set after each decision: the one the
    decision recorded, else the last one known for the version that serves (a stopped
    run, a rollback); None when neither is known."""
    known: dict[int | None, float] = {}
    found: list[float | None] = []
    for decision in decisions:
        accuracy = decision.reference_accuracy
        if accuracy is None:
            accuracy = known.get(decision.served_version)
        elif decision.served_version is not None:
            known[decision.served_version] = accuracy
        found.append(accuracy)
    return found


def page(serving_dir: str, decisions: Sequence[history.Decision], problems: Sequence[str]) -> str:
    """The HTML page: the chart, its legend, then the table as text."""
    table = "\n".join([header(), *(line(d) for d in decisions)])
    if not decisions:
        table = f"no decisions recorded in {serving_dir} yet"
    stalled = history.stall(list(decisions))
    notes = "".join(
        f"<li>{html.escape(p)}</li>"
        for p in [*([stalled.describe()] if stalled else []), *problems]
    )
    title = html.escape(f"What each run decided: {serving_dir}")
    return (
        "<!DOCTYPE html>\n"
        '<html lang="en"><head><meta charset="utf-8">'
        f"<title>{title}</title>"
        "<style>body{font-family:sans-serif;margin:1.5em}pre{font-size:13px}"
        ".problems{color:#c62828}</style></head><body>\n"
        f"<h1>{title}</h1>\n"
        "<p>The served model's accuracy on the reference set (the champion's reference "
        "set, else the run's eval split), after each decision, oldest first. Hover a "
        "marker for the decision.</p>\n"
        f"{chart(decisions)}\n"
        + (f'<ul class="problems">{notes}</ul>\n' if notes else "")
        + f"<pre>{html.escape(table)}</pre>\n</body></html>\n"
    )


def chart(decisions: Sequence[history.Decision]) -> str:
    """An inline SVG: one column per decision (oldest left, labelled with its span), the
    served accuracy as a step line, and a marker for each decision, shaped by its kind,
    with the decision's line as its tooltip."""
    plot_w = _WIDTH - _LEFT - _RIGHT
    plot_h = _HEIGHT - _TOP - _BOTTOM
    step = plot_w / max(len(decisions), 1)
    accuracies = served_accuracies(decisions)

    def x(index: int) -> float:
        return _LEFT + step * (index + 0.5)

    def y(accuracy: float | None) -> float:
        if accuracy is None:
            return _TOP + plot_h + _UNKNOWN_BAND
        return _TOP + plot_h * (1 - min(max(accuracy, 0.0), 1.0))

    parts = [
        f'<svg xmlns="http://www.w3.org/2000/svg" width="{_WIDTH}" height="{_HEIGHT + 40}" '
        f'viewBox="0 0 {_WIDTH} {_HEIGHT + 40}" role="img" '
        'aria-label="served accuracy on the reference set, decision by decision">',
        *_axes(plot_w, plot_h, y),
        _step_line(accuracies, x, y),
    ]
    for index, (decision, accuracy) in enumerate(zip(decisions, accuracies, strict=True)):
        label = "-" if decision.span is None else str(decision.span)
        parts.append(
            f'<text x="{x(index):.1f}" y="{_TOP + plot_h + _UNKNOWN_BAND + 22}" '
            f'font-size="11" text-anchor="middle">{html.escape(label)}</text>'
        )
        parts.append(
            f'<g class="decision" data-kind="{html.escape(decision.kind)}">'
            f"<title>{html.escape(line(decision))}</title>"
            f"{marker(decision.kind, x(index), y(accuracy))}</g>"
        )
    parts += _legend()
    parts.append("</svg>")
    return "\n".join(parts)


def _axes(plot_w: float, plot_h: float, y: YScale) -> list[str]:
    parts = [
        f'<rect x="{_LEFT}" y="{_TOP}" width="{plot_w}" height="{plot_h}" fill="none" '
        'stroke="#999"/>'
    ]
    for tick in (0.0, 0.25, 0.5, 0.75, 1.0):
        parts.append(
            f'<line x1="{_LEFT}" x2="{_LEFT + plot_w}" y1="{y(tick):.1f}" y2="{y(tick):.1f}" '
            'stroke="#e0e0e0"/>'
            f'<text x="{_LEFT - 6}" y="{y(tick) + 4:.1f}" font-size="11" '
            f'text-anchor="end">{tick:.2f}</text>'
        )
    band = _TOP + plot_h + _UNKNOWN_BAND
    parts.append(
        f'<text x="{_LEFT - 6}" y="{band + 4}" font-size="11" text-anchor="end">n/a</text>'
        f'<text x="{_LEFT + plot_w / 2:.1f}" y="{band + 38}" font-size="11" '
        'text-anchor="middle">span</text>'
        f'<text x="14" y="{_TOP + plot_h / 2:.1f}" font-size="11" text-anchor="middle" '
        f'transform="rotate(-90 14 {_TOP + plot_h / 2:.1f})">ref. accuracy</text>'
    )
    return parts


def _step_line(accuracies: Sequence[float | None], x: XScale, y: YScale) -> str:
    """The served accuracy held until the next decision changes it; broken where it is
    not known."""
    path: list[str] = []
    previous: float | None = None
    for index, accuracy in enumerate(accuracies):
        if accuracy is None:
            previous = None
            continue
        if previous is None:
            path.append(f"M{x(index):.1f},{y(accuracy):.1f}")
        else:
            path.append(f"H{x(index):.1f}V{y(accuracy):.1f}")
        previous = accuracy
    if not path:
        return ""
    return f'<path d="{" ".join(path)}" fill="none" stroke="#424242" stroke-width="2"/>'


def marker(kind: str, cx: float, cy: float, size: float = 6.0) -> str:
    """A decision's marker: pushed a filled circle, refused a hollow one, stopped a
    triangle, rollback a diamond, failed a square."""
    colour = _COLOURS.get(kind, "#616161")
    if kind == history.PUSHED:
        return f'<circle cx="{cx:.1f}" cy="{cy:.1f}" r="{size}" fill="{colour}"/>'
    corners = {
        history.STOPPED: ((0, -1), (1, 1), (-1, 1)),
        history.ROLLBACK: ((0, -1), (1, 0), (0, 1), (-1, 0)),
        history.FAILED: ((-1, -1), (1, -1), (1, 1), (-1, 1)),
    }.get(kind)
    if corners:
        points = " ".join(f"{cx + dx * size:.1f},{cy + dy * size:.1f}" for dx, dy in corners)
        return f'<polygon points="{points}" fill="{colour}"/>'
    return (
        f'<circle cx="{cx:.1f}" cy="{cy:.1f}" r="{size}" fill="white" stroke="{colour}" '
        'stroke-width="2"/>'
    )


def _legend() -> list[str]:
    parts = []
    left = _LEFT
    top = _HEIGHT + 24
    for kind, text in _LEGEND.items():
        parts.append(
            f'<g class="legend">{marker(kind, left + 6, top - 4, 5)}'
            f'<text x="{left + 16}" y="{top}" font-size="12">{html.escape(text)}</text></g>'
        )
        left += 24 + 7 * len(text)
    return parts
