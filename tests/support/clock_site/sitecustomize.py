"""Put first on PYTHONPATH of the servers a test starts (tests/support/servers.server_env) while the
test process runs with `--clock-shift` (tests/support/clock.py): the server's Python clock is shifted
by the same days, so a session, token or report the test makes is as old there as in the test."""

import os
from datetime import UTC, datetime, timedelta

_days = int(os.environ.get("MEDIATOR_TEST_CLOCK_SHIFT_DAYS") or 0)
if _days:
    import time_machine

    time_machine.travel(datetime.now(UTC) + timedelta(days=_days), tick=True).start()
