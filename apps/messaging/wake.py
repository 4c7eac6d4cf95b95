"""A subject's wake state on its queue-depth row: whether a stored message should wake its phone
(docs/push.md, "When a wake leaves").

The row (`PendingQueueDepth`: a Decentrl DID's, or a DIDComm client's `didcomm:<hash>`) carries,
beside its presence (presence.py):

- `devices`: how many push devices the subject registered (the push app keeps it, under the
  row's lock: `devices_lock`, `devices_set`). Zero for every subject of a tenant without push,
  so the storing statements' read of the row (presence.STATE_UNDER_LOCK, already there for the
  socket rule) is all that pushes cost them.
- `woken`: a wake was claimed since the subject's last pickup. At most one wake leaves between
  two pickups: a queue that grows by a hundred while the phone sleeps wakes it once.
- `woken_at`: epoch seconds at which the last claimed wake leaves (or left). A claim leaves no
  earlier than `woken_at + interval` (settings.PUSH_WAKE_INTERVAL_S), so a phone that picks up
  and sleeps again at once is not woken more often than that; the claim then leaves later
  (`claim` returns the delay) instead of not at all, so no stored message waits for a next one.

The storing statement reads the state under the row's lock and only reports it (`WAKE_DUE`);
the claim is this module's conditional UPDATE after the store commits (`claim`), one statement
that only the first of concurrent stores wins. It is not done inside the storing statement: the
DIDComm forward reads the row under a share lock (a client's recipient keys forward in
parallel) and upgrading it to a write lock in two concurrent forwards would deadlock; the
Decentrl statement's queue trigger already writes the row in that statement. The claim costs a
round trip only when a wake is due, at most about once per pickup.

A pickup (`picked_up`: the subject fetched or acknowledged its queue; a socket opening does the
same in presence.socket_entered) clears `woken`. A claim whose sends all failed gives the wake
back (`release`), so the next stored message tries again.
"""

from __future__ import annotations

from django.db import connection

from .models import PendingQueueDepth
from .presence import LIVE, STATE_SQL

_DEPTH = PendingQueueDepth._meta.db_table

# Makes the row if it is missing and locks it until the caller's transaction ends.
_LOCK = (
    f"INSERT INTO {_DEPTH} (tenant_id, recipient_did, depth) VALUES (%s, %s, 0)"
    f" ON CONFLICT (tenant_id, recipient_did) DO UPDATE SET devices = {_DEPTH}.devices"
)
_DEVICES = f"UPDATE {_DEPTH} SET devices = %s WHERE tenant_id = %s AND recipient_did = %s"
# The claim: only a subject with a device, not woken since its pickup and (unless asked) with no
# socket vouching for it. Returns the seconds until the wake may leave.
_CLAIM = (
    f"UPDATE {_DEPTH} SET woken = true, woken_at = GREATEST(%s, woken_at + %s)"
    " WHERE tenant_id = %s AND recipient_did = %s AND devices > 0 AND NOT woken"
    f" AND (%s OR {STATE_SQL.format(d='', now='%s')} <> {LIVE})"
    " RETURNING woken_at - %s"
)
# Only a woken row is written: a pickup of a subject that was not woken costs an index probe.
_PICKED_UP = f"UPDATE {_DEPTH} SET woken = false WHERE tenant_id = %s AND recipient_did = %s AND woken"
_WOKEN = f"SELECT woken FROM {_DEPTH} WHERE tenant_id = %s AND recipient_did = %s"


def devices_lock(*, tenant_id: int, subject: str) -> None:
    """Lock the subject's row (made if missing) until the caller's transaction ends."""
    with connection.cursor() as cur:
        cur.execute(_LOCK, [tenant_id, subject])


def devices_set(*, tenant_id: int, subject: str, count: int) -> None:
    """The subject has `count` devices (the caller holds `devices_lock`)."""
    with connection.cursor() as cur:
        cur.execute(_DEVICES, [count, tenant_id, subject])


def claim(*, tenant_id: int, subject: str, now_s: int, interval_s: int, even_if_live: bool = False) -> int | None:
    """Claim the subject's wake: the seconds until it may leave (0: now), or None when none is
    due (no device, woken since its pickup, or a socket is open and `even_if_live` is False)."""
    with connection.cursor() as cur:
        cur.execute(_CLAIM, [now_s, interval_s, tenant_id, subject, even_if_live, now_s, now_s])
        row = cur.fetchone()
    return None if row is None else max(int(row[0]), 0)


def picked_up(*, tenant_id: int, subject: str) -> None:
    """The subject fetched or acknowledged its queue: a next stored message may wake it."""
    with connection.cursor() as cur:
        cur.execute(_PICKED_UP, [tenant_id, subject])


def release(*, tenant_id: int, subject: str) -> None:
    """Give a claimed wake back (nothing reached the device): the next stored message claims again,
    no earlier than the interval after this one."""
    picked_up(tenant_id=tenant_id, subject=subject)


def still_woken(*, tenant_id: int, subject: str) -> bool:
    """Whether the subject's claimed wake still stands (no pickup since): a retry is still wanted."""
    with connection.cursor() as cur:
        cur.execute(_WOKEN, [tenant_id, subject])
        row = cur.fetchone()
    return bool(row and row[0])
