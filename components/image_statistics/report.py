"""report.html: one self-contained page (inline SVG charts, thumbnails as data URIs, no
external resource) drawn from the image_stats.json document.

Every chart element carries its numbers in data- attributes (`data-key`, `data-value`,
`data-counts`), so tests and scripts can check the figures against the JSON.
"""

from __future__ import annotations

import base64
import math
from collections.abc import Sequence
from typing import Any

from imgpipe.components.common.formats import image_stats as schema
from imgpipe.components.common.formats.layout import IMAGE_STATS_FILE
from imgpipe.components.image_statistics import drift as drift_lib
from imgpipe.components.image_statistics import html_cells, label_audit_report
from imgpipe.components.image_statistics.accumulator import CHANNEL_NAMES

CHANNEL_COLOURS = ("#d62728", "#2ca02c", "#1f77b4")
BAR_COLOUR = "#4c72b0"
MAX_THUMBNAIL_CLASSES = 100
MAX_LISTED_ROWS = 500
_W, _H, _PAD = 560, 220, 34

# Thumbnails per split: {label name: [(path, jpeg bytes)]}.
Thumbnails = dict[str, dict[str, list[tuple[str, bytes]]]]

_CSS = """
body{font-family:'DejaVu Sans',Arial,sans-serif;margin:24px;color:#222;background:#fff}
h1{font-size:22px}h2{font-size:18px;border-bottom:1px solid #ccc;padding-bottom:4px}
h3{font-size:15px;margin-bottom:4px}
table{border-collapse:collapse;font-size:12px;margin:6px 0}
td,th{border:1px solid #ddd;padding:3px 6px;text-align:left;vertical-align:top}
.charts{display:flex;flex-wrap:wrap;gap:12px}
svg.chart{background:#fafafa;border:1px solid #e4e4e4}
.class-row{display:flex;align-items:center;gap:4px;margin:3px 0}
.class-row .name{width:140px;font-size:12px;overflow:hidden;text-overflow:ellipsis}
img.thumb{width:72px;height:72px;border:1px solid #ccc}
.anomaly{color:#a00000}.ok{color:#006000}
"""


_e = html_cells.escaped


def _fmt(value: Any) -> str:
    if isinstance(value, float):
        return f"{value:.4g}"
    if isinstance(value, list | tuple):
        return "[" + ", ".join(_fmt(v) for v in value) + "]"
    return "n/a" if value is None else str(value)


def bar_chart(chart: str, split: str, title: str, items: Sequence[tuple[str, int]]) -> str:
    """An SVG bar chart; each bar is a <rect data-key=... data-value=...>."""
    peak = max([v for _, v in items] + [1])
    width = (_W - 2 * _PAD) / max(len(items), 1)
    parts = [
        f'<svg class="chart" data-chart="{_e(chart)}" data-split="{_e(split)}" '
        f'width="{_W}" height="{_H}" xmlns="http://www.w3.org/2000/svg">',
        f'<text x="{_PAD}" y="16" font-size="13">{_e(title)}</text>',
        f'<text x="{_PAD}" y="30" font-size="10" fill="#666">max {peak}</text>',
    ]
    base = _H - _PAD
    for i, (key, value) in enumerate(items):
        height = (base - 36) * value / peak
        x = _PAD + i * width
        parts.append(
            f'<rect data-key="{_e(key)}" data-value="{value}" x="{x:.1f}" '
            f'y="{base - height:.1f}" width="{max(width - 1, 0.5):.1f}" '
            f'height="{height:.1f}" fill="{BAR_COLOUR}"><title>{_e(key)}: {value}'
            "</title></rect>"
        )
        if len(items) <= 30:
            parts.append(
                f'<text x="{x + width / 2:.1f}" y="{base + 12}" font-size="9" '
                f'text-anchor="middle">{_e(str(key)[:10])}</text>'
            )
    parts.append("</svg>")
    return "".join(parts)


def pixel_chart(split: str, histogram: Sequence[Sequence[int]], title: str) -> str:
    """Per-channel 256-bin pixel histograms as three polylines (data-counts: the bins).

    Heights are square roots of the counts, so that a spike (black borders, a white
    background) does not flatten the rest.
    """
    peak = math.sqrt(max(max(channel) for channel in histogram) or 1)
    base, top = _H - _PAD, 36
    parts = [
        f'<svg class="chart" data-chart="pixels" data-split="{_e(split)}" width="{_W}" '
        f'height="{_H}" xmlns="http://www.w3.org/2000/svg">',
        f'<text x="{_PAD}" y="16" font-size="13">{_e(title)}</text>',
    ]
    for channel, counts in enumerate(histogram):
        points = " ".join(
            f"{_PAD + (_W - 2 * _PAD) * level / 255:.1f},"
            f"{base - (base - top) * math.sqrt(c) / peak:.1f}"
            for level, c in enumerate(counts)
        )
        parts.append(
            f'<polyline data-channel="{CHANNEL_NAMES[channel]}" '
            f'data-counts="{",".join(str(c) for c in counts)}" points="{points}" '
            f'fill="none" stroke="{CHANNEL_COLOURS[channel]}" stroke-width="1.2"/>'
        )
    parts.append(
        f'<text x="{_PAD}" y="{base + 14}" font-size="9">0</text>'
        f'<text x="{_W - _PAD}" y="{base + 14}" font-size="9" '
        'text-anchor="end">255</text></svg>'
    )
    return "".join(parts)


def _size(num_bytes: float) -> str:
    for unit in ("", "K", "M"):
        if num_bytes < 1024:
            return f"{num_bytes:g}{unit}"
        num_bytes /= 1024
    return f"{num_bytes:g}G"


def _histogram_items(
    hist: schema.Histogram | schema.ByteStats, bytes_scale: bool = False
) -> list[tuple[str, int]]:
    """Bars labelled by their bin's lower edge."""
    return [
        (f"≥{_size(edge) if bytes_scale else f'{edge:g}'}", count)
        for edge, count in zip(hist.edges, hist.counts, strict=True)
    ]


def _table(headers: Sequence[str], rows: Sequence[Sequence[Any]], css: str = "") -> str:
    head = "".join(f"<th>{_e(h)}</th>" for h in headers)
    body = "".join(
        "<tr>" + "".join(f"<td>{_e(_fmt(c))}</td>" for c in row) + "</tr>"
        for row in rows[:MAX_LISTED_ROWS]
    )
    more = (
        f"<p>{len(rows) - MAX_LISTED_ROWS} more rows in {IMAGE_STATS_FILE}</p>"
        if len(rows) > MAX_LISTED_ROWS
        else ""
    )
    return f'<table class="{css}"><tr>{head}</tr>{body}</table>{more}'


def _thumbnail_grid(split: str, by_label: dict[str, list[tuple[str, bytes]]]) -> str:
    rows = []
    for label in sorted(by_label)[:MAX_THUMBNAIL_CLASSES]:
        images = "".join(
            f'<img class="thumb" data-label="{_e(label)}" title="{_e(path)}" alt="{_e(path)}" '
            f'src="data:image/jpeg;base64,{base64.b64encode(jpeg).decode("ascii")}">'
            for path, jpeg in by_label[label]
        )
        rows.append(f'<div class="class-row"><span class="name">{_e(label)}</span>{images}</div>')
    return f'<div class="thumbnails" data-split="{_e(split)}">{"".join(rows)}</div>'


def _split_section(split: str, s: schema.SplitStats, thumbnails: dict[str, list]) -> str:
    parts = [f'<section class="split" data-split="{_e(split)}"><h2>Split {_e(split)}</h2>']
    pixels, native = s.pixels, s.native_pixels
    rows: list[list[Any]] = [["images", s.images], ["undecodable", s.undecodable]]
    if pixels:
        rows += [
            ["mean (RGB, 0..255)", pixels.mean],
            ["std", pixels.std],
            ["image-weighted mean", pixels.image_weighted_mean],
        ]
    if native:
        rows += [
            ["native mean", native.mean],
            ["native std", native.std],
            ["native image-weighted mean", native.image_weighted_mean],
        ]
    labels = s.labels
    rows += [
        ["imbalance ratio (max/min)", labels.imbalance_ratio],
        ["missing labels", ", ".join(labels.missing) or "none"],
        ["formats", s.formats],
        ["channels", s.channels],
        ["colour modes", s.color_modes],
        ["mean bytes", s.bytes.mean],
        ["exact duplicate groups", s.duplicates.groups],
        ["near-duplicate groups", s.near_duplicates.groups],
    ]
    parts.append(_table(["", ""], rows, "summary"))
    charts = [bar_chart("labels", split, "Label distribution", list(labels.counts.items()))]
    if pixels:
        charts.append(pixel_chart(split, pixels.histogram, "Pixel values per channel (√ count)"))
    for name, hist in (
        ("width", s.sizes.width),
        ("height", s.sizes.height),
        ("aspect_ratio", s.sizes.aspect_ratio),
    ):
        charts.append(
            bar_chart(
                name,
                split,
                f"{name.replace('_', ' ').capitalize()} (stored image)",
                _histogram_items(hist),
            )
        )
    charts.append(bar_chart("bytes", split, "Bytes per image", _histogram_items(s.bytes, True)))
    parts.append(f'<div class="charts">{"".join(charts)}</div>')
    parts.append("<h3>Sample thumbnails per class (as the model sees them)</h3>")
    parts.append(_thumbnail_grid(split, thumbnails))
    groups: tuple[schema.ExactGroup | schema.NearGroup, ...]
    for key, title, groups in (
        ("duplicates", "Exact duplicates within the split", s.duplicates.examples),
        ("near_duplicates", "Near duplicates (same dHash)", s.near_duplicates.examples),
    ):
        if groups:
            parts.append(f"<h3>{title}</h3>")
            parts.append(
                _table(
                    ["group", "files"],
                    [[_group_key(g)[:16], ", ".join(f.path for f in g.files)] for g in groups],
                    key,
                )
            )
    if s.undecodable_files:
        parts.append("<h3>Undecodable images</h3>")
        parts.append(_table(["path", "reason"], [[f.path, f.reason] for f in s.undecodable_files]))
    parts.append("</section>")
    return "".join(parts)


def _share(count: int, total: int) -> str:
    return f"{count} ({count / total:.1%})" if total else str(count)


def _sides_table(base: schema.DataSummary, now: schema.DataSummary) -> str:
    """Both sides, row by row: pixels, classes, class means and size bins."""
    rows: list[list[Any]] = [["images", base.images, now.images]]
    for c, channel in enumerate(CHANNEL_NAMES):
        rows.append([f"mean {channel}", base.mean[c], now.mean[c]])
        rows.append([f"std {channel}", base.std[c], now.std[c]])
    for label in sorted(set(base.labels) | set(now.labels)):
        rows.append(
            [
                f"images of {label!r}",
                _share(base.labels.get(label, 0), base.images),
                _share(now.labels.get(label, 0), now.images),
            ]
        )
    for label in sorted(set(base.class_means) | set(now.class_means)):
        rows.append(
            [
                f"mean RGB of {label!r}",
                base.class_means.get(label),
                now.class_means.get(label),
            ]
        )
    for name in drift_lib.SIZE_HISTOGRAMS:
        before, after = getattr(base.sizes, name), getattr(now.sizes, name)
        for edge, b, a in zip(before.edges, before.counts, after.counts, strict=True):
            if b or a:
                rows.append(
                    [
                        f"{name} >={edge:g}",
                        _share(b, sum(before.counts)),
                        _share(a, sum(after.counts)),
                    ]
                )
    return _table(["", "served model's data (baseline)", "this data"], rows, "drift-sides")


def _drift_section(drift: schema.Drift | None) -> str:
    title = "<h2>Drift from the served model's training data</h2>"
    if drift is None:
        return (
            f'<section class="drift" data-checked="false">{title}'
            "<p>No comparison was asked for.</p></section>"
        )
    if not drift.checked:
        return (
            f'<section class="drift" data-checked="false">{title}'
            f'<p class="drift-reason">Not checked: {_e(drift.reason)}</p></section>'
        )
    rows = "".join(
        f'<tr data-metric="{_e(c.metric)}" data-drifted="{str(c.drifted).lower()}" '
        f'data-distance="{c.distance!r}" data-threshold="{c.threshold!r}" '
        f'class="{"anomaly" if c.drifted else "ok"}">'
        + html_cells.cells(
            (
                c.metric,
                c.subject,
                drift_lib.value_text(c, c.baseline),
                drift_lib.value_text(c, c.current),
                f"{c.distance:.4g}",
                f"{c.threshold:g}",
                "drift" if c.drifted else "ok",
            )
        )
        + "</tr>"
        for c in drift.checks
    )
    head = html_cells.header_cells(
        ("metric", "where largest", "baseline", "now", "distance", "threshold", "")
    )
    classes = (
        f'<p class="{"anomaly" if drift.classes_added or drift.classes_removed else "ok"}" '
        f'data-added="{_e(",".join(drift.classes_added))}" '
        f'data-removed="{_e(",".join(drift.classes_removed))}">Classes added: '
        f"{_e(', '.join(drift.classes_added) or 'none')}; removed: "
        f"{_e(', '.join(drift.classes_removed) or 'none')}.</p>"
    )
    notes = f'<p class="drift-reason">{_e(drift.reason)}</p>' if drift.reason else ""
    sides = (
        _sides_table(drift.baseline, drift.current)
        if drift.baseline is not None and drift.current is not None
        else ""
    )
    return (
        f'<section class="drift" data-checked="true">{title}'
        f"<p>Baseline: {_e(drift.baseline_uri)}. Every split pooled on each side.</p>"
        f'<table class="drift-checks"><tr>{head}</tr>{rows}</table>{classes}{notes}'
        f"<h3>Both sides</h3>{sides}</section>"
    )


def _group_key(group: schema.ExactGroup | schema.NearGroup) -> str:
    return group.sha256 if isinstance(group, schema.ExactGroup) else group.dhash


def render(
    stats: schema.ImageStats,
    thumbnails: Thumbnails,
    skipped: Sequence[schema.FileReason],
    audit_thumbnails: Sequence[tuple[str, bytes]] = (),
) -> str:
    """The report page for the statistics; `audit_thumbnails` are (path, JPEG) of the
    label audit's listed images."""
    leakage = stats.leakage
    prep = stats.preprocessing
    body = [
        f"<h1>Image statistics</h1><p>{_e(stats.source.examples_uri)}<br>"
        f"Pixels as the model sees them: {_e(prep.description)} "
        f"({_e(prep.function)}).</p>"
    ]
    if stats.anomalies:
        body.append(
            '<h2 class="anomaly">Anomalies</h2><ul class="anomalies">'
            + "".join(
                f'<li class="anomaly" data-code="{_e(a.code)}">{_e(a.message)}</li>'
                for a in stats.anomalies
            )
            + "</ul>"
        )
    else:
        body.append('<p class="ok">No anomalies.</p>')
    body.append(_drift_section(stats.drift))
    if stats.label_audit is not None:
        body.append(label_audit_report.section(stats.label_audit, audit_thumbnails))
    body.extend(
        _split_section(split, s, thumbnails.get(split, {})) for split, s in stats.splits.items()
    )
    body.append(
        f"<section><h2>Leakage across splits</h2><p>{leakage.groups} groups of "
        f"identical images in more than one split; images per split: "
        f"{_e(leakage.images_by_split)}.</p>"
    )
    body.append(
        _table(
            ["sha256", "files"],
            [
                [g.sha256[:16], ", ".join(f"{f.path} ({f.split})" for f in g.files)]
                for g in leakage.examples
            ],
            "leakage",
        )
        + "</section>"
    )
    body.append(
        f"<section><h2>Files skipped by ImageExampleGen</h2><p>{len(skipped)} files."
        "</p>"
        + _table(["path", "reason"], [[r.path, r.reason] for r in skipped], "skipped")
        + "</section>"
    )
    body.append(
        "<section><h2>Notes</h2><dl>"
        + "".join(f"<dt>{_e(k)}</dt><dd>{_e(v)}</dd>" for k, v in stats.notes.items())
        + "</dl></section>"
    )
    return (
        '<!DOCTYPE html>\n<html lang="en"><head><meta charset="utf-8">'
        f"<title>Image statistics</title><style>{_CSS}</style></head><body>"
        + "".join(body)
        + "</body></html>\n"
    )
