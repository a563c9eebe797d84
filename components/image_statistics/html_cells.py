"""The report's table cells, shared by its sections (report.py, label_audit_report.py)."""

from __future__ import annotations

import html
from collections.abc import Iterable
from typing import Any

from imgpipe.components.common.runtime.printable import printable


def escaped(value: Any) -> str:
    """Text for the page: names escaped (printable), then HTML-escaped."""
    return html.escape(printable(str(value)), quote=True)


def cells(values: Iterable[Any]) -> str:
    """One `<td>` per value, escaped."""
    return "".join(f"<td>{escaped(v)}</td>" for v in values)


def header_cells(names: Iterable[str]) -> str:
    """One `<th>` per column name (the page's own words, not escaped)."""
    return "".join(f"<th>{name}</th>" for name in names)
