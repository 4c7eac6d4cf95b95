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


def test_legend_names_are_whole_and_never_share_a_place():
    svg = str(charts.stacked_bars("Commands", ["Jan 01"], {t: [1] for t in TYPES}))
    legend = re.findall(r'<text class="legend" x="([\d.]+)" y="([\d.]+)">([^<]+)</text>', svg)
    assert [name for _, _, name in legend] == TYPES  # nothing cut ("REQUEST_COMMUNICATION_CO…")
    places = [(float(x), float(y)) for x, y, _ in legend]
    assert len(set(places)) == len(TYPES)
    # Two columns 320 units apart: the longest name (31 characters at 12 px, < 7 px each) fits its column.
    assert sorted({x for x, _ in places}) == [74.0, 394.0] and max(len(t) for t in TYPES) * 7 < 320 - 18
    height = int(re.search(r'viewBox="0 0 720 (\d+)"', svg).group(1))
    assert height == 260 + 22 * 6 and max(y for _, y in places) < height
