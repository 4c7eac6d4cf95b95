"""A recipient's `/ws` presence, kept on its queue-depth row: whether a stored event needs a push.

The rule (`may_have_socket`): a stored message is pushed unless the recipient's row (a
`PendingQueueDepth` row: for a Decentrl event its recipient's, for a DIDComm forward its client's),
read under that row's lock in the transaction that stores the message, says that none of its
sockets is open (`live` = 0) or that none has vouched for it lately (`live_until` passed). No
row: pushed (nothing is known). The DIDComm forward function makes a missing row, with nobody
live; Decentrl's queue trigger makes it on the first event. So only a DID's first message can
find no row.

Why it is exact. A socket joins its channel-layer group first, then marks itself present here
(`socket_entered`, which writes the row), then reads its backlog. The storing transaction locks
the row until it commits:
- if the socket's write came first, the storing transaction's locked read returns it (PostgreSQL
  re-reads a row that changed under a lock, even after the statement began), so the event is
  pushed, to a socket already in the group;
- if the storing transaction came first, the socket's write waits for its commit, so the
  backlog read that follows sees the event.

Why two fields. `live` counts the open sockets, so the push stops the moment the last one
closes. A socket tier that dies without closing its sockets leaves `live` too high; `live_until`
bounds that: every open socket renews it (`socket_renewed`, every third of the lease), so a
count nobody renews stops vouching one lease (MEDIATOR_WS_PRESENCE_LEASE_S, 30 minutes by
default) after its sockets died. Until then such a recipient is pushed to as before (the push
finds no socket in the group): the error is only ever on the side of pushing. A socket that
cannot renew before its lease runs out closes itself (apps/decentrl/consumers.py), so an open
socket is always vouched for.

The same row carries the subject's wake state (apps/messaging/wake.py): `state_under_lock`'s code
tells a storing statement both whether to push to sockets and whether a wake-up push is due.

A row's key is a Decentrl DID, or for a DIDComm client `didcomm:<client hash>` (`didcomm_key`):
the one rule of the key, which is also the push app's wake subject.

Times are epoch seconds from the application's clock (the command statement's `now_s`).
"""

from __future__ import annotations

from django.conf import settings
from django.db import connection

from .models import PendingQueueDepth

_DEPTH = PendingQueueDepth._meta.db_table

# The prefix of a DIDComm client's key: what tells its rows from Decentrl DIDs' rows. The forward
# function (apps/didcomm/forward.py) builds the same text in SQL from this constant.
DIDCOMM_PREFIX = "didcomm:"


def decentrl_key(did: str) -> str:
    """The row's key of a Decentrl DID: the DID."""
    return did


def didcomm_key(client_hash: str) -> str:
    """The row's key of a DIDComm client, from its mediation's `client_hash` (a client DID may be
    far longer than the row's key: did:peer, up to 16 KiB)."""
    return f"{DIDCOMM_PREFIX}{client_hash}"


# A socket's write: the row with one socket vouched for until %s, or, when it exists, `live` set by
# the given expression and `live_until` the later of the row's time and ours.
_MARK = (
    f"INSERT INTO {_DEPTH} (tenant_id, recipient_did, depth, live, live_until) VALUES (%s, %s, 0, 1, %s)"
    f" ON CONFLICT (tenant_id, recipient_did) DO UPDATE SET live = {{live}},"
    f" live_until = CASE WHEN {_DEPTH}.live_until > EXCLUDED.live_until THEN {_DEPTH}.live_until"
    " ELSE EXCLUDED.live_until END"
)
# A socket opens: one more; the subject is awake, so its next wake may leave (wake.py: a pickup).
_ENTER = _MARK.format(live=f"{_DEPTH}.live + 1, woken = false")
# An open socket renews its lease. The row may have gone (a purge) or lost its count: at least
# this socket is open.
_RENEW = _MARK.format(live=f"CASE WHEN {_DEPTH}.live > 0 THEN {_DEPTH}.live ELSE 1 END")
# A socket closes (never below zero).
_LEAVE = f"UPDATE {_DEPTH} SET live = CASE WHEN live > 0 THEN live - 1 ELSE 0 END WHERE tenant_id = %s AND recipient_did = %s"

# What a stored message does to the row's subject (NULL when there is no row), one code:
NO_SOCKET, LIVE, WAKE_DUE, WOKEN = 0, 1, 2, 3
# LIVE: a socket may be open (push to it, no wake); WAKE_DUE: none is, it has a device and no wake
# since its last pickup; WOKEN: none is, it has a device already woken (coalesced); NO_SOCKET:
# none is and no device. Parameters: `live_params`.
STATE_SQL = (
    f"CASE WHEN {{d}}live > 0 AND {{d}}live_until > {{now}} THEN {LIVE} WHEN {{d}}devices = 0 THEN {NO_SOCKET}"
    f" WHEN {{d}}woken THEN {WOKEN} ELSE {WAKE_DUE} END"
)
_STATE = f"SELECT {STATE_SQL.format(d='', now='%s')} FROM {_DEPTH} WHERE tenant_id = %s AND recipient_did = %s"
# The same under the row's lock, as a sub-select for a statement that stores an event.
STATE_UNDER_LOCK = f"({_STATE} FOR UPDATE)"


def state_under_share_lock_plpgsql(*, into: str, tenant: str, key: str, now: str) -> str:
    """The statements of a plpgsql storing function (the DIDComm forward's) that read the subject's
    code (STATE_SQL) into the variable `into` under its row's share lock, for the SQL expressions
    `tenant`, `key` and `now` (epoch seconds) of that function. A missing row is made first, with
    nobody live and no device, so that a socket's write waits for the storing commit too. A share
    lock: concurrent stores for one subject do not wait for each other (wake.py: why the claim is
    not made here)."""
    state = STATE_SQL.format(d="d.", now=now)
    return (
        f"SELECT {state} INTO {into}\n"
        f"      FROM {_DEPTH} d WHERE d.tenant_id = {tenant} AND d.recipient_did = {key} FOR SHARE;\n"
        "    IF NOT FOUND THEN\n"
        f"        INSERT INTO {_DEPTH} (tenant_id, recipient_did, depth) VALUES ({tenant}, {key}, 0)\n"
        "            ON CONFLICT (tenant_id, recipient_did) DO NOTHING;\n"
        f"        SELECT {state} INTO {into}\n"
        f"          FROM {_DEPTH} d WHERE d.tenant_id = {tenant} AND d.recipient_did = {key} FOR SHARE;\n"
        "    END IF;"
    )


def lease_s() -> int:
    """How long one socket's renewal vouches for its recipient (settings.MEDIATOR_WS_PRESENCE_LEASE_S)."""
    return settings.MEDIATOR_WS_PRESENCE_LEASE_S


def live_params(*, tenant_id: int, did: str, now_s: int) -> list:
    """The parameters of STATE_UNDER_LOCK."""
    return [now_s, tenant_id, did]


def may_have_socket(state: int | None) -> bool:
    """The push rule on the code STATE_UNDER_LOCK returned inside a statement: push unless it says
    no socket is open (NULL: no row yet, pushed)."""
    return state is None or state == LIVE


def wake_due(state: int | None) -> bool:
    """Whether the stored message's subject should get a wake-up push (wake.py claims it)."""
    return state == WAKE_DUE


def wake_coalesced(state: int | None) -> bool:
    """Whether the stored message found its subject woken already (counted, nothing sent)."""
    return state == WOKEN


def socket_entered(*, tenant_id: int, did: str, now_s: int) -> None:
    """One more open socket for (tenant, did); call it after joining the group, before the backlog."""
    with connection.cursor() as cur:
        cur.execute(_ENTER, [tenant_id, did, now_s + lease_s()])


def socket_renewed(*, tenant_id: int, did: str, now_s: int) -> None:
    """An open socket of (tenant, did) vouches for it for another lease."""
    with connection.cursor() as cur:
        cur.execute(_RENEW, [tenant_id, did, now_s + lease_s()])


def socket_left(*, tenant_id: int, did: str) -> None:
    """One open socket fewer for (tenant, did); call it before leaving the group."""
    with connection.cursor() as cur:
        cur.execute(_LEAVE, [tenant_id, did])
