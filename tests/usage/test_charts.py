"""The report's charts name every command type that carried traffic, in full, without overlap."""

from __future__ import annotations

import re
from datetime import date
from types import SimpleNamespace

from apps.usage import charts, selectors

TYPES = [
    "QUERY_EVENTS", "SAVE_EVENTS", "ACKNOWLEDGE_EVENTS", "QUERY_PENDING_EVENTS", "TWO_WAY_PRIVATE",
    "REQUEST_COMMUNICATION_CONTRACT", "QUERY_COMMUNICATION_CONTRACTS", "SAVE_COMMUNICATION_CONTRACT",
    "UPDATE_EVENT_TAGS", "COMMUNICATION_CONTRACT_RESPONSE", "QUERY_PENDING_CONTRACT_REQUESTS",
    "ACKNOWLEDGE_CONTRACT_REQUESTS",
]  # fmt: skip
DAY = date(2026, 1, 1)


def test_every_type_with_traffic_is_a_series_by_name_and_didcomm_is_labelled():
    rows = [
        SimpleNamespace(day=DAY, command_type=t, protocol="decentrl", commands=100 - i) for i, t in enumerate(TYPES)
    ]
    rows.append(SimpleNamespace(day=DAY, command_type="forward", protocol="didcomm", commands=1))
    series = selectors.chart_series([], rows, [DAY])
    assert list(series["by_type"]) == [*TYPES, "didcomm: forward"]  # busiest first, no "other"
    assert series["by_type"]["TWO_WAY_PRIVATE"] == [96]


def test_legend_names_are_whole_html_items_with_a_colour_class():
    """The legend is an HTML list under the SVG (names wrap at any width; Chromium's layout checks
    are in test_browser_layout.py), its colours are classes, never inline styles (CSP)."""
    svg = str(charts.stacked_bars("Commands", ["Jan 01"], {t: [1] for t in TYPES}))
    legend = re.findall(r'<li><span class="swatch (c\d+)" aria-hidden="true"></span>([^<]+)</li>', svg)
    assert [name for _, name in legend] == TYPES  # nothing cut ("REQUEST_COMMUNICATION_CO…")
    assert [cls for cls, _ in legend] == [f"c{i}" for i in range(len(TYPES))]
    assert svg.index("</svg>") < svg.index('<ul class="chart-legend">') and "style=" not in svg
    assert 'class="legend"' not in svg  # no legend text inside the scaled SVG any more
    two = str(charts.stacked_bars("Commands", ["Jan 01"], {"ok": [1], "failed": [1]}, colors=("#10b981", "#ef4444")))
    assert re.findall(r'class="swatch (c\d+)"', two) == ["c2", "c4"]


def test_at_most_seven_day_labels_whatever_the_range():
    for n in (1, 7, 14, 30, 90, 366):
        svg = str(charts.lines("Stored", [f"d{i}" for i in range(n)], {"events": [1] * n}))
        shown = len(re.findall(r'<text class="tick day"', svg))
        assert shown == n if n <= 7 else 4 <= shown <= 7, (n, shown)


def test_every_palette_colour_has_its_swatch_class_and_seventeen_types_never_share_a_colour():
    css = charts.__file__.rsplit("/", 1)[0] + "/static/usage/usage.css"
    with open(css) as f:
        text = f.read()
    for i, col in enumerate(charts.PALETTE):
        assert f".usage .swatch.c{i} {{ background:{col}; }}" in text
    assert len(set(charts.PALETTE)) == len(charts.PALETTE) >= 17
