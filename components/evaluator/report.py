"""The Evaluator's report: report.html beside evaluation.json, for a person.

The decision and its reason, then every evaluation set with both models' accuracy (or
why it was skipped), then every check. Everything shown is in evaluation.json.
"""

from __future__ import annotations

import html
import os

from imgpipe.components.common.formats import layout
from imgpipe.components.common.runtime.printable import printable
from imgpipe.components.common.storage import fileio
from imgpipe.components.evaluator import evaluation as ev


def _text(value: object) -> str:
    return html.escape(printable(str(value)), quote=True)


def _score(metrics: ev.ModelMetrics | None) -> str:
    return (
        "" if metrics is None else f"{metrics.accuracy:.4f} ({metrics.correct}/{metrics.examples})"
    )


def render(result: ev.Evaluation) -> str:
    """The report page of one evaluation."""
    decision = "blessed" if result.decision.blessed else "not blessed"
    champion = result.champion
    rows = "".join(
        f"<tr><td>{_text(c.name)}</td><td>{_score(c.candidate)}</td>"
        f"<td>{_score(c.champion)}</td><td>{_text(', '.join(c.classes))}</td>"
        f"<td>{_text(c.uri)}</td><td>{_text(c.note)}</td></tr>"
        for c in result.comparisons
    )
    checks = "".join(
        f'<tr class="{"pass" if c.passed else "fail"}"><td>{_text(c.name)}</td>'
        f"<td>{'pass' if c.passed else 'FAIL'}</td><td>{_text(c.detail)}</td></tr>"
        for c in result.decision.checks
    )
    return (
        '<!DOCTYPE html>\n<html><head><meta charset="utf-8"><title>Evaluation</title>'
        "<style>td,th{padding:2px 8px;text-align:left}.fail{color:#b00}</style></head><body>"
        f'<h1 data-blessed="{int(result.decision.blessed)}">{decision}</h1>'
        f"<p>{_text(result.decision.reason)}</p>"
        f"<p>candidate on the new '{_text(result.eval_split)}' split: "
        f"{_score(result.candidate)}; champion: {_text(champion.status)}"
        f"{' ' + _text(champion.version) if champion.version is not None else ''}"
        f"{' (' + _text(champion.note) + ')' if champion.note else ''}</p>"
        "<h2>Evaluation sets</h2><table><tr><th>set</th><th>candidate</th><th>champion</th>"
        f"<th>classes</th><th>where</th><th>note</th></tr>{rows}</table>"
        f"<h2>Checks</h2><table>{checks}</table></body></html>\n"
    )


def write(uri: str, result: ev.Evaluation) -> str:
    """Writes uri/report.html; returns its path."""
    path = os.path.join(uri, layout.REPORT_FILE)
    fileio.write_text(path, render(result))
    return path
