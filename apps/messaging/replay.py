"""The replay rule of every front door, once (docs/architecture.md, "One replay rule"): Decentrl's
commands and AUTHENTICATE frames (their nonces) and DIDComm's authcrypt messages (their ids).

1. **The window** (`Window`): a message dated `at` is admitted while its drift from the
   mediator's clock is within the width, a drift of exactly the width admitted or not
   (`inclusive`: DCTRL-0004 §5.4's commands refuse "more than" the window, §10.2's AUTHENTICATE
   must be "< 5 minutes"): a parameter, not a second rule.
2. **The claim** of its key (`claim_statement`'s text on the protocol's table, `claim`): fresh, or
   its record past. The unique constraint is the lock: of concurrent claims of one key exactly one
   gets a row. A record is kept through its `expires_at` inclusive and is past strictly after it,
   for the claim and for the prune alike (`past`).
3. **Consumed whatever happens** (`consumed`): the claim usually rides in a larger statement or
   transaction (the command's one statement, the DIDComm handler's transaction); if that fails with
   a database error, nothing of it committed, so the key is claimed on its own before the error goes up.

Every time here is Unix milliseconds. A claim's parameters are its key's values (scope first), the
record's `expires_at` (the last instant it lives), then now.
"""

from __future__ import annotations

import contextlib
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import TypeVar

from django.db import DatabaseError
from django.db.models import QuerySet

from .sql import prepared_cursor

T = TypeVar("T")
Q = TypeVar("Q", bound=QuerySet)


@dataclass(frozen=True)
class Window:
    """How far a message's own time may be from the mediator's clock."""

    width_ms: int
    inclusive: bool = True

    def admits(self, at_ms: int, now_ms: int) -> bool:
        """Whether a message dated `at_ms` is within the window at `now_ms`."""
        return abs(now_ms - at_ms) < self.width_ms + self.inclusive


def claim_statement(table: str, key: tuple[str, ...], *, scope: tuple[str, ...] = ()) -> str:
    """The claim on `table` (unique on `key`, with `id` and an integer `expires_at`). `scope` are
    columns stored with the record but not part of its key (a past record taken over gets the new
    values)."""
    columns = ", ".join((*scope, *key))
    taken_over = ", ".join(f"{c} = EXCLUDED.{c}" for c in (*scope, "expires_at"))
    return (
        f"INSERT INTO {table} ({columns}, expires_at) VALUES ({', '.join(['%s'] * (len(scope) + len(key) + 1))}) "
        f"ON CONFLICT ({', '.join(key)}) DO UPDATE SET {taken_over} "
        f"WHERE {table}.expires_at < %s RETURNING id"
    )


def claim(statement: str, params: Sequence) -> bool:
    """Run a `claim_statement` on its own: True when the key was fresh, or its record past and
    taken over. Commits with the caller's transaction, or at once outside one."""
    with prepared_cursor() as cur:
        cur.execute(statement, params)
        return cur.fetchone() is not None


def consumed(statement: str, params: Sequence, run: Callable[[], T]) -> T:
    """`run()`, which claims with `statement` and `params` itself (inside its own statement or
    transaction); if it fails with a database error, the key is claimed on its own, so that it stays
    consumed, and the error goes up. A second failure is left to that error."""
    try:
        return run()
    except DatabaseError:
        with contextlib.suppress(DatabaseError):
            claim(statement, params)
        raise


def past(records: Q, now_ms: int) -> Q:
    """The records among `records` (a replay table's rows) past their life at `now_ms`: the prune's."""
    return records.filter(expires_at__lt=now_ms)
