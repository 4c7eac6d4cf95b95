"""Server-side SVG charts: no JavaScript, no CDN, works offline and in any browser.

Every label is escaped; values are numbers. Each chart is an <svg class="usage-chart"> with a
<title> tooltip on every bar and point, followed by its legend as an HTML list
(<ul class="chart-legend">): the legend's names wrap like text at any width, so they are never cut,
squeezed or drawn over each other, and they keep the page's font size when the SVG is scaled down
on a phone. Colours are classes (c0..c19 of PALETTE, usage.css): no inline style, for the CSP.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from html import escape

from django.utils.safestring import SafeString, mark_safe

from apps.wire.display import human_bytes

PALETTE = [
    "#4f46e5",
    "#0ea5e9",
    "#10b981",
    "#f59e0b",
    "#ef4444",
    "#8b5cf6",
    "#ec4899",
    "#14b8a6",
    "#84cc16",
    "#f97316",
    "#64748b",
    "#a855f7",
    # More than 12 types carry traffic on a busy day (DECENTRL and DIDComm): 20 colours, none repeats.
    "#1e3a8a",
    "#854d0e",
    "#facc15",
    "#9f1239",
    "#4d7c0f",
    "#0e7490",
    "#c026d3",
    "#78716c",
]
# The plot's own units; the SVG scales to its card (about 560 px wide at 1440 px, 340 px at 390 px,
# where usage.css enlarges the tick labels so they stay readable; LEFT leaves room for them).
W, H = 560, 240
LEFT, RIGHT, TOP, BOTTOM = 80, 12, 14, 44
MAX_DAY_LABELS = 7  # day labels stay apart at the enlarged size on a phone


def color(i: int) -> str:
    return PALETTE[i % len(PALETTE)]


def nice_max(value: float) -> float:
    """The smallest 1/2/4/6/8 x 10^k at or above `value` (axis top)."""
    if value <= 0:
        return 1.0
    exp = 10 ** math.floor(math.log10(value))
    # Candidates whose quarter is still a round number (4 grid steps).
    for m in (1, 2, 4, 6, 8, 10):
        if m * exp >= value:
            return m * exp
    return 10 * exp


def human(value: float, unit: str = "") -> str:
    """Short number: 1.2k, 3.4M; bytes in binary units (apps/wire/display.py)."""
    if unit == "B":
        return human_bytes(value)
    if unit == "%":
        return f"{value * 100:.1f}%"
    if unit == "ms" and value >= 1000:
        for suffix, size in (("h", 3_600_000), ("min", 60_000), ("s", 1000)):
            if value >= size:
                return f"{value / size:.1f} {suffix}"
    for suffix, scale in (("M", 1e6), ("k", 1e3)):
        if abs(value) >= scale:
            return f"{value / scale:.1f}{suffix}"
    if unit == "ms":
        return f"{value:.1f} ms" if value < 100 else f"{value:.0f} ms"
    return f"{value:.0f}" if float(value).is_integer() else f"{value:.3g}"


def _frame(title: str, ymax: float, unit: str, labels: Sequence[str]) -> list[str]:
    """Axes, grid and day labels of a chart."""
    parts = [
        f'<svg class="usage-chart" viewBox="0 0 {W} {H}" role="img" '
        f'aria-label="{escape(title)}" xmlns="http://www.w3.org/2000/svg">',
        f"<title>{escape(title)}</title>",
    ]
    plot_h = H - TOP - BOTTOM
    for i in range(5):
        y = TOP + plot_h - plot_h * i / 4
        parts.append(f'<line class="grid" x1="{LEFT}" y1="{y:.1f}" x2="{W - RIGHT}" y2="{y:.1f}"/>')
        parts.append(
            f'<text class="tick" x="{LEFT - 6}" y="{y + 4:.1f}" text-anchor="end">{escape(human(ymax * i / 4, unit))}</text>'
        )
    n = max(len(labels), 1)
    step = (W - LEFT - RIGHT) / n
    every = max(1, math.ceil(n / MAX_DAY_LABELS))
    for i, label in enumerate(labels):
        if i % every == 0:
            x = LEFT + step * (i + 0.5)
            parts.append(
                f'<text class="tick day" x="{x:.1f}" y="{H - BOTTOM + 24}" text-anchor="middle">{escape(label)}</text>'
            )
    return parts


def _legend(legend: list[tuple[str, str]]) -> str:
    """The names of the series with their colours, as an HTML list under the SVG."""
    items = "".join(
        f'<li><span class="swatch c{PALETTE.index(col)}" aria-hidden="true"></span>{escape(name)}</li>'
        for name, col in legend
    )
    return f'<ul class="chart-legend">{items}</ul>'


def stacked_bars(
    title: str, labels: Sequence[str], series: dict[str, Sequence[float]], unit: str = "", colors: Sequence[str] = ()
) -> SafeString:
    """One bar per label, stacked by series (e.g. commands per day by type)."""
    totals = [sum(float(s[i] or 0) for s in series.values()) for i in range(len(labels))]
    ymax = nice_max(max(totals, default=0))
    palette = list(colors) or [color(i) for i in range(len(series))]
    legend = [(name, palette[i % len(palette)]) for i, name in enumerate(series)]
    parts = _frame(title, ymax, unit, labels)
    plot_h = H - TOP - BOTTOM
    step = (W - LEFT - RIGHT) / max(len(labels), 1)
    bar_w = max(2.0, step * 0.7)
    for i, label in enumerate(labels):
        base = 0.0
        x = LEFT + step * i + (step - bar_w) / 2
        for j, (name, values) in enumerate(series.items()):
            v = float(values[i] or 0)
            if v <= 0:
                continue
            y0 = TOP + plot_h - plot_h * (base + v) / ymax
            h = plot_h * v / ymax
            parts.append(
                f'<rect class="bar" x="{x:.1f}" y="{y0:.1f}" width="{bar_w:.1f}" height="{max(h, 0.5):.1f}" '
                f'fill="{palette[j % len(palette)]}"><title>{escape(label)} · {escape(name)}: {escape(human(v, unit))}</title></rect>'
            )
            base += v
    parts.append("</svg>")
    parts.append(_legend(legend))
    return mark_safe("".join(parts))  # noqa: S308 - every interpolated label is escaped above


def lines(title: str, labels: Sequence[str], series: dict[str, Sequence[float | None]], unit: str = "") -> SafeString:
    """One line per series, with a dot on each point (gaps where a value is missing)."""
    values = [float(v) for s in series.values() for v in s if v is not None]
    ymax = nice_max(max(values, default=0))
    legend = [(name, color(i)) for i, name in enumerate(series)]
    parts = _frame(title, ymax, unit, labels)
    plot_h = H - TOP - BOTTOM
    step = (W - LEFT - RIGHT) / max(len(labels), 1)
    for j, (name, vals) in enumerate(series.items()):
        points = []
        segments: list[list[str]] = [[]]
        for i, v in enumerate(vals):
            if v is None:
                segments.append([])
                continue
            x = LEFT + step * (i + 0.5)
            y = TOP + plot_h - plot_h * float(v) / ymax
            segments[-1].append(f"{x:.1f},{y:.1f}")
            points.append(
                f'<circle class="dot" cx="{x:.1f}" cy="{y:.1f}" r="3" fill="{color(j)}">'
                f"<title>{escape(labels[i])} · {escape(name)}: {escape(human(float(v), unit))}</title></circle>"
            )
        for seg in segments:
            if len(seg) > 1:
                parts.append(f'<polyline class="line" points="{" ".join(seg)}" stroke="{color(j)}"/>')
        parts.extend(points)
    parts.append("</svg>")
    parts.append(_legend(legend))
    return mark_safe("".join(parts))  # noqa: S308 - every interpolated label is escaped above
