"""Waiting, in a test, until another session of the test database waits for a lock."""

from __future__ import annotations

import time

from django.db import connection


def another_session_waits_for_a_lock(timeout: float = 15.0) -> bool:
    """True once a session of this database waits for a lock (within `timeout` seconds)."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        with connection.cursor() as cur:
            # Inside a transaction pg_stat_activity is read once and kept: ask for a fresh view.
            cur.execute("SELECT pg_stat_clear_snapshot()")
            cur.execute(
                "SELECT count(*) FROM pg_stat_activity WHERE wait_event_type = 'Lock' AND datname = current_database()"
            )
            if cur.fetchone()[0]:
                return True
        time.sleep(0.02)
    return False
