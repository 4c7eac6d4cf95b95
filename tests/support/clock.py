"""The test process's clock (docs/architecture.md, "Tests and the clock").

- `@pytest.mark.clock("2026-11-20T12:00:00Z")`: the test, and every function-scoped fixture it uses,
  runs on a clock that starts at that instant (time-machine; it ticks on from there, so waits with a
  deadline still end). A test that mixes fixed dates with "today" names its today this way. Only
  the test process: a server the test starts keeps its own clock.
- `--clock-shift=DAYS` (or MEDIATOR_TEST_CLOCK_SHIFT_DAYS): the whole test process runs that many days
  from the real date, from its first fixture to its last, so a test that reads the real calendar where
  it should not fails. `make test` runs the date-sensitive tests a year ahead and a year back. A clock
  marker still wins inside its test; the shift only shows whether its freeze covers everything the
  test reads. The servers a test starts (tests/support/servers.py) are shifted alike (clock_site/);
  PostgreSQL, Redis and the Spark JVM keep the real clock.
"""

from __future__ import annotations

import os
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest
import time_machine

SHIFT_ENV = "MEDIATOR_TEST_CLOCK_SHIFT_DAYS"
# First on the PYTHONPATH of a server a test starts while shifted (tests/support/servers.server_env).
SITE_DIR = Path(__file__).resolve().parent / "clock_site"


def pytest_addoption(parser):
    parser.addoption(
        "--clock-shift",
        type=int,
        default=None,
        metavar="DAYS",
        help=f"run the test process's clock DAYS days from today (negative: back); or {SHIFT_ENV}",
    )


def clock_shift_days(config) -> int:
    given = config.getoption("--clock-shift")
    return int(os.environ.get(SHIFT_ENV) or 0) if given is None else given


def pytest_configure(config):
    config.addinivalue_line(
        "markers", 'clock(instant, tick=True): the test runs on a clock started at `instant` ("…Z", UTC)'
    )
    days = clock_shift_days(config)
    if days:
        traveller = time_machine.travel(datetime.now(UTC) + timedelta(days=days), tick=True)
        traveller.start()
        config.add_cleanup(traveller.stop)
        os.environ[SHIFT_ENV] = str(days)  # for the servers a test starts: SITE_DIR


def pytest_report_header(config):
    days = clock_shift_days(config)
    return f"clock: shifted {days:+d} days (tests/support/clock.py)" if days else None


@pytest.fixture(autouse=True)
def _clock_marker(request):
    """Autouse, so it starts before the test's other function-scoped fixtures: a session or token a
    fixture makes carries the same clock as the test's body."""
    marker = request.node.get_closest_marker("clock")
    if marker is None:
        yield
        return
    instant = datetime.fromisoformat(marker.args[0])
    assert instant.tzinfo is not None, "a clock marker names a UTC instant (…Z)"
    with time_machine.travel(instant, tick=marker.kwargs.get("tick", True)):
        yield
