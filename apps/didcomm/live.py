"""Live delivery, v1 and v2: what a socket keeps per live client to push a Pickup `delivery`
without the database (the grant, the mediator identity with its key unsealed, the client's key),
loaded when live mode starts and again on queue.LIVE_REFRESH (revocation, rotation).

The versions differ only in the frame: a v2 client gets a Pickup 3.0 (or 4.0) `delivery`
authcrypt (JWE) from the tenant's current identity to its `skid`, as text; a v1 agent a Pickup 2.0
`delivery` (empty `~thread`, as a Credo mediator pushes), or Pickup 4.0's v1 form, authcrypt from
its connection's identity to its verkey, as bytes. Messages stay queued until messages-received.

Live deliveries are acknowledged (`Awaiting`): what a socket pushed and has not seen leave the
queue within MEDIATOR_DIDCOMM_LIVE_ACK_TIMEOUT_S is announced (queue.live_unacknowledged) and
pushed again, up to LIVE_RESENDS times on that socket; it stays queued for the next socket or
pickup whatever happens.
"""

from __future__ import annotations

import json
import time
import uuid
from collections.abc import Callable
from dataclasses import dataclass, field
from functools import partial

from apps.didcomm.core.keys import PublicKey
from apps.tenants.models import Tenant

from . import protocols
from .handlers import MAX_DELIVERY_LIMIT
from .handlers_v1 import RETURN_ROUTE, attachments_v1
from .identity import accepting_for, identity_current
from .mediation import connection_for_key, mediation_for, mediation_of
from .models import Mediation, MediatorIdentity
from .packing import agreement_key_for, pack_reply, pack_to, stamp
from .queue import Row, messages_rows

# The clock of the ack timeout (monotonic seconds); tests replace it (no sleeps).
clock: Callable[[], float] = time.monotonic
# How many times one socket pushes an unacknowledged message again (then it waits for the next
# socket or a pickup, still queued).
LIVE_RESENDS = 2
# How many unacknowledged pushes one live client's entry follows; past it the oldest is let go
# (still queued: only its resend on this socket is lost).
AWAITING_MAX = 1024


@dataclass(slots=True)
class Awaiting:
    """One live client's pushes on one socket not yet known to be acknowledged: message id ->
    (deadline on `clock`, pushes so far). Pure bookkeeping; the queue decides what was acked."""

    entries: dict[str, tuple[float, int]] = field(default_factory=dict)

    def pushed(self, ids: list[str], now: float, timeout: float) -> None:
        """`ids` went out at `now`: each is due `timeout` later."""
        for mid in ids:
            sends = self.entries.pop(mid, (0.0, 0))[1]
            self.entries[mid] = (now + timeout, sends + 1)
        while len(self.entries) > AWAITING_MAX:
            del self.entries[next(iter(self.entries))]

    def postpone(self, ids: list[str], until: float) -> None:
        """Check `ids` again at `until` (the queue could not be read), their pushes unchanged."""
        for mid in ids:
            if mid in self.entries:
                self.entries[mid] = (until, self.entries[mid][1])

    def due(self, now: float) -> list[str]:
        """The ids whose deadline passed (at most MAX_DELIVERY_LIMIT, oldest push first)."""
        return [mid for mid, (deadline, _) in self.entries.items() if deadline <= now][:MAX_DELIVERY_LIMIT]

    def next_deadline(self) -> float | None:
        return min((deadline for deadline, _ in self.entries.values()), default=None)

    def settle(self, due: list[str], unacked: list[Row], *, resend: bool) -> list[Row]:
        """`due` were checked and `unacked` (a subset) are still queued: forget the acknowledged
        ones, those pushed 1 + LIVE_RESENDS times already, and all of them when not `resend` (the
        socket closed); the rows to push again (call `pushed` once they went out)."""
        still = {row[0] for row in unacked}
        again = set()
        for mid in due:
            sends = self.entries.get(mid, (0.0, LIVE_RESENDS + 1))[1]
            if resend and mid in still and sends <= LIVE_RESENDS:
                again.add(mid)
            else:
                self.entries.pop(mid, None)
        return [row for row in unacked if row[0] in again]


@dataclass(slots=True)
class LiveTarget:
    """A live client's push state: its grant (an id, not the row: kept per socket), the identity
    pushes come from (one instance per identity and process) and how a frame is made."""

    mediation_id: int
    identity: MediatorIdentity
    pack: Callable[[list[Row]], str | bytes]
    loaded_at: float = field(default_factory=time.monotonic)

    def backlog(self, ids: list[str] | None) -> list[Row]:
        """The listed messages still queued, or the oldest ones (ids None); database."""
        return messages_rows(
            mediation=Mediation(pk=self.mediation_id), recipient=None, limit=MAX_DELIVERY_LIMIT, ids=ids
        )

    def frame(self, rows: list[Row]) -> str | bytes:
        """The packed `delivery` of `rows` (they stay queued until messages-received); no database."""
        return self.pack(rows)


def _frame_v2(
    pickup: str, identity: MediatorIdentity, client_did: str, recipient: tuple[str, PublicKey], rows: list[Row]
) -> str:
    delivery = {
        "type": pickup + "delivery",
        "body": {},
        "attachments": [{"id": m, "data": d} for m, d, _ in rows],
    }
    message = stamp(delivery, from_did=identity.did, to_did=client_did)
    return json.dumps(pack_to(message, identity=identity, recipient=recipient), separators=(",", ":"))


def _frame_v1(pickup: str, identity: MediatorIdentity, their_verkey: str, rows: list[Row]) -> bytes:
    delivery: dict = {"@type": pickup + "delivery", "@id": str(uuid.uuid4()), "~attach": attachments_v1(rows)}
    if pickup == protocols.PICKUP_V2:  # what a Credo 0.6 mediator pushes; 4.0's has no thread (no request)
        delivery.update({"~thread": {}, "~transport": dict(RETURN_ROUTE)})
    envelope = pack_reply(delivery, identity=identity, their_verkey=their_verkey, routing_keys=[])
    return json.dumps(envelope, separators=(",", ":")).encode("utf-8")


def shared_identity(*, tenant: Tenant, identity: MediatorIdentity) -> MediatorIdentity:
    """This process's instance of `identity` for live sockets: the one of the tenant's accepting
    identities (identity.accepting_for, keys unsealed once per process), or `identity` itself
    when it no longer accepts (a v1 connection made with an identity retired past its grace)."""
    for cached in accepting_for(tenant=tenant).identities:
        if cached.pk == identity.pk:
            return cached
    return identity


def live_start(
    *, tenant: Tenant, protocol: str, client_did: str, client_kid: str, backlog: bool, pickup: str | None = None
) -> tuple[LiveTarget | None, list[Row]]:
    """(the push state of a live socket's client, what is queued when `backlog`, oldest first);
    (None, []) when its grant (v1: its connection or grant) is gone. `client_kid`: the v2 client's
    `skid`, the v1 agent's verkey; `pickup`: the Pickup protocol whose `delivery` is pushed (None:
    3.0 for v2, 2.0 for v1)."""
    connection = connection_for_key(tenant=tenant, verkey=client_kid) if protocol == "v1" else None
    if protocol == "v1":
        mediation = mediation_of(connection=connection) if connection is not None else None
    else:
        mediation = mediation_for(tenant=tenant, client_did=client_did)
    if mediation is None:
        return None, []
    # The backlog before the identity: a rotation commits the new identity and its announcement to
    # the client together, so an announcement in the backlog is never packed from the identity it
    # retired (read the other way round, a rotation committing between the two reads did that).
    rows = messages_rows(mediation=mediation, recipient=None, limit=MAX_DELIVERY_LIMIT) if backlog else []
    if connection is not None:  # v1: the connection's identity, whose Ed25519 key it knows
        identity = shared_identity(tenant=tenant, identity=connection.identity)
        pack: Callable[[list[Row]], str | bytes] = partial(
            _frame_v1, pickup or protocols.PICKUP_V2, identity, client_kid
        )
        identity.authentication_key  # noqa: B018 - unsealed here, in a thread, not on the first push
    else:
        identity = shared_identity(tenant=tenant, identity=identity_current(tenant=tenant))
        pack = partial(_frame_v2, pickup or protocols.PICKUP, identity, client_did, agreement_key_for(client_kid))
        identity.agreement_key  # noqa: B018 - unsealed here, in a thread, not on the first push
    return LiveTarget(mediation.pk, identity, pack), rows
