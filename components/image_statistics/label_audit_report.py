"""The label audit's section of report.html: the verdict, the gate, and each flagged
image with its thumbnail, given and suggested class and the model's confidence."""

from __future__ import annotations

import base64
from collections.abc import Sequence

from imgpipe.components.common.formats import image_stats as schema
from imgpipe.components.common.images import label_audit
from imgpipe.components.image_statistics import html_cells

TITLE = "Label audit"


_e = html_cells.escaped


def section(result: schema.LabelAudit | None, thumbnails: Sequence[tuple[str, bytes]] = ()) -> str:
    """The section; `thumbnails` are (path, JPEG) of the listed issues, in their order."""
    title = f"<h2>{TITLE}</h2>"
    if result is None:
        return (
            f'<section class="label-audit" data-checked="false">{title}'
            "<p>Not asked for.</p></section>"
        )
    verdict = label_audit.describe(result)
    if not result.checked:
        return (
            f'<section class="label-audit" data-checked="false">{title}'
            f'<p class="audit-reason">{_e(verdict)}</p></section>'
        )
    pictures = dict(thumbnails)
    rows = "".join(
        f'<tr class="label-issue" data-path="{_e(i.path)}" data-given="{_e(i.given)}" '
        f'data-suggested="{_e(i.suggested)}" data-confidence="{i.confidence!r}">'
        + (
            f'<td><img class="thumb" alt="{_e(i.path)}" src="data:image/jpeg;base64,'
            f'{base64.b64encode(pictures[i.path]).decode("ascii")}"></td>'
            if pictures.get(i.path)
            else "<td></td>"
        )
        + html_cells.cells(
            (
                i.split,
                i.path,
                i.given,
                i.suggested,
                f"{i.confidence:.3f}",
                f"{i.given_confidence:.3f}",
            )
        )
        + "</tr>"
        for i in result.issues
    )
    head = html_cells.header_cells(
        ("", "split", "file", "given", "suggested", "confidence", "p(given)")
    )
    more = (
        f"<p>{result.flagged - len(result.issues)} more flagged images are not listed.</p>"
        if result.flagged > len(result.issues)
        else ""
    )
    notes = f'<p class="audit-reason">{_e(result.reason)}</p>' if result.reason else ""
    return (
        f'<section class="label-audit" data-checked="true" '
        f'data-flagged-fraction="{result.flagged_fraction!r}" '
        f'data-threshold="{result.threshold!r}" data-exceeded="{str(result.exceeded).lower()}">'
        f'{title}<p class="{"anomaly" if result.exceeded else "ok"}">{_e(verdict)}</p>'
        f"<p>Model: {_e(result.model)}; {result.images} images, {result.audited} audited, "
        f"{result.not_sampled} left out by the cap, {result.unknown_class} of classes the "
        f"model does not know. Confident learning (cleanlab, "
        f"{label_audit.FILTER_BY}).</p>{notes}"
        f'<table class="label-issues"><tr>{head}</tr>{rows}</table>{more}</section>'
    )
