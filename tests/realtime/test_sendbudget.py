"""`SendBudget.drained` (apps/realtime/sendbudget.py): how long a socket closed over its budget
waits for what it queued, the ERROR frame last, to leave before its close is queued. The wait
restarts whenever the peer takes bytes, so a slow reader gets everything however long its queue
takes; a peer that takes nothing is given up on after the timeout."""

from __future__ import annotations

import asyncio

from apps.realtime import sendbudget
from apps.realtime.sendbudget import SendBudget


class _Transport:
    """The write buffer of a Twisted transport as SendBudget reads it; `per_read` bytes leave at each
    read, as from a peer that keeps reading."""

    connected = True
    offset = 0
    _tempDataLen = 0

    def __init__(self, unsent: int, per_read: int):
        self.left = unsent
        self.per_read = per_read

    @property
    def dataBuffer(self) -> bytes:  # noqa: N802 - Twisted's name
        data = b"x" * self.left
        self.left = max(0, self.left - self.per_read)
        return data


def test_a_peer_that_keeps_reading_is_waited_for_past_the_timeout(monkeypatch):
    monkeypatch.setattr(sendbudget, "PACE_POLL_S", 0.001)
    # 400 polls of progress take longer than the 20 ms without one that ends the wait.
    budget = SendBudget(1024, _Transport(unsent=400, per_read=1))
    assert asyncio.run(budget.drained(timeout=0.02)) is True
    assert budget.unsent() == 0


def test_a_peer_that_takes_nothing_is_given_up_on_after_the_timeout(monkeypatch):
    monkeypatch.setattr(sendbudget, "PACE_POLL_S", 0.001)
    budget = SendBudget(1024, _Transport(unsent=400, per_read=0))
    assert asyncio.run(budget.drained(timeout=0.02)) is False
    assert budget.unsent() == 400
