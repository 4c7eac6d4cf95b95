"""How people read a time, a size and a duration, everywhere: console, dashboard, API and CLI.

Times are ISO 8601 in UTC to the second with an explicit `Z` (`2026-11-23T08:36:12Z`); sizes are
binary units (B, KiB, MiB, GiB); durations are milliseconds or seconds with their unit. Pure
Python, like the rest of the wire library, so the CLI prints exactly what the console shows.
"""

from __future__ import annotations

import re
from datetime import UTC, datetime

# The one time format. Django's spelling of it (templates, admin lists) is in
# mediator_project/formats/en/formats.py and DRF's DATETIME_FORMAT is this string;
# tests/tenants/test_time_format.py checks that all three write the same text.
UTC_FORMAT = "%Y-%m-%dT%H:%M:%SZ"
DJANGO_UTC_FORMAT = r"Y-m-d\TH:i:s\Z"
DJANGO_DATE_FORMAT = "Y-m-d"


def utc_iso(value: datetime | int | float) -> str:
    """A datetime (aware) or Unix seconds as `YYYY-MM-DDTHH:MM:SSZ`."""
    if isinstance(value, datetime):
        if value.tzinfo is None:
            raise ValueError("a naive datetime has no zone to show")
        return value.astimezone(UTC).strftime(UTC_FORMAT)
    return datetime.fromtimestamp(value, UTC).strftime(UTC_FORMAT)


def grouped(n: int) -> str:
    """`1 000 000`: a whole number with its thousands set apart by spaces."""
    return f"{n:,}".replace(",", " ")


def human_bytes(n: int | float) -> str:
    """`512 B`, `1.5 KiB`, `6.0 MiB`: powers of 1024, one decimal above bytes."""
    size = float(n)
    for unit in ("B", "KiB", "MiB", "GiB"):
        if abs(size) < 1024:
            return f"{size:.0f} {unit}" if unit == "B" else f"{size:.1f} {unit}"
        size /= 1024
    return f"{size:.1f} TiB"


def human_ms(ms: float) -> str:
    """A duration in milliseconds: `0.42 ms`, `12.0 ms`, `340 ms`, `1.2 s`, `3.5 min`."""
    ms = float(ms)
    if ms >= 60_000:
        return f"{ms / 60_000:.1f} min"
    if ms >= 1000:
        return f"{ms / 1000:.1f} s"
    if ms >= 100:
        return f"{ms:.0f} ms"
    if ms >= 1:
        return f"{ms:.1f} ms"
    return f"{ms:.2f} ms"


# C0 controls (line feed, carriage return, ESC, NUL …), DEL, C1 controls and the Unicode line and
# paragraph separators: what could end a log line, forge another or drive a terminal.
_CONTROL = re.compile("[\x00-\x1f\x7f-\x9f\u2028\u2029]")


def _escape_control(match: re.Match[str]) -> str:
    code = ord(match.group())
    return f"\\x{code:02x}" if code < 0x100 else f"\\u{code:04x}"


def printable(text: str) -> str:
    """`text` with every control character written as a visible escape (`\\x0a`, `\\x1b`,
    `\\u2028`): one line that cannot forge another in a log, nor drive a terminal."""
    return _CONTROL.sub(_escape_control, text)


# Words that keep their own capitals wherever they stand in a label.
ACRONYMS = {"did": "DID", "dids": "DIDs", "didcomm": "DIDComm", "http": "HTTP", "ip": "IP", "url": "URL", "id": "ID"}


def words(key: str) -> str:
    """A snake_case key as a label: `pending_events` → `Pending events`, `didcomm_messages` →
    `DIDComm messages`, `http_status` → `HTTP status`."""
    parts = [ACRONYMS.get(p.lower(), p.lower()) for p in key.replace("_", " ").split()]
    if parts and parts[0] == parts[0].lower():
        parts[0] = parts[0][:1].upper() + parts[0][1:]
    return " ".join(parts)
