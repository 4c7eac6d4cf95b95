"""The DIDComm v2 WebSocket (`/didcomm/ws`): an async shell over the one message path (docs/contributing.md §10).

Frames in are packed DIDComm messages (text or binary), handled exactly as `POST /didcomm`;
answers (return_route) and problem reports go back on the socket as text frames. A
live-delivery-change from an authcrypt client puts the socket in that client's channel-layer
group (per (tenant, DID), any number of sockets across processes) and marks the client present
(apps/messaging/presence.py: a forward wakes only a client that may be live; the mark is renewed
while the socket is open, apps/realtime/presence.py); each stored message then wakes it, and it pushes a packed Pickup 3.0 `delivery` within the socket's send budget
(apps/realtime/sendbudget.py; over it the socket closes with 4509). A push is never the only
copy: messages leave the queue only on messages-received, TTL or eviction. A DIDComm v1 agent gets
the same pushes without live-delivery-change when it asks `~transport.return_route: "all"` on the
socket in a message other than a pickup one (implicit pickup, RFC 0092: Credo's `Implicit`
strategy, ACA-Py's mediator), until it turns live delivery off or the socket closes.

A push needs no database: the wake carries the stored message (up to 64 KiB; bigger ones are
read from the queue), and the socket keeps, per live client, what it loaded when live mode
started (grant, mediator identity, the client's key), loaded again on queue.LIVE_REFRESH
(revocation, rotation) and after a push once LIVE_STATE_MAX_AGE_S old (docs/didcomm.md).

Every socket is also in its tenant's group (realtime.groups.tenant_group_name): when the tenant is
suspended or deleted, or DIDComm switched off, it gets a problem report and closes (4503 / 4404, the
codes a new connection is refused with). Each frame also meets the tenant's current state (the
per-process caches `POST /didcomm` uses): a socket that missed that message answers a refusal, then
closes.

Admission and idleness (docs/didcomm.md): an upgrade counts against the per-address connect limit
of `/ws` (apps.ops.limits.per_ip, scope ws_connect: one bucket for both socket paths; over it a problem
report and close 4029). A socket is *in use* while a client on it is live (`_in_use`: a v2 client
that sent live-delivery-change, a v1 connection in live delivery, such as return_route "all");
otherwise each frame the mediator accepts (answered without a problem report) keeps it open for
MEDIATOR_DIDCOMM_WS_IDLE_TIMEOUT_S, and once that passes without one it gets a problem report and
close 4408. Refused frames (garbage, bad envelopes, rate-limited) do not keep a socket open.
"""

from __future__ import annotations

import asyncio
import json
import logging
import time
from dataclasses import dataclass, field

from channels.generic.websocket import AsyncWebsocketConsumer
from django.conf import settings
from django.db import DatabaseError
from django.utils import timezone

from apps.didcomm.core.errors import DidcommError
from apps.ops import limits
from apps.ops.clientip import forwarded_client
from apps.realtime.admission import CLOSE_CODE as OVER_CAPACITY_CLOSE
from apps.realtime.admission import GATE, Ticket, db_hop, retry_reason
from apps.realtime.groups import Memberships, group_name, tenant_group_name
from apps.realtime.layerloss import CHANNEL_LAYER, LayerLossMixin
from apps.realtime.presence import Presence
from apps.realtime.sendbudget import CLOSE_CODE as SEND_BUDGET_CLOSE
from apps.realtime.sendbudget import SendBudget, frame_bytes
from apps.tenants.models import Tenant
from apps.tenants.selectors import tenant_for_host
from apps.wire.errors import ProtocolError

from . import live as livemod
from . import metrics
from .dispatch import handle, log_failure, refusal
from .identity import accepting_for
from .live import Awaiting, LiveTarget, live_start
from .models import presence_key
from .policy import policy_for
from .problems import Problem, problem_message, unavailable
from .protocols import PICKUP4, Code
from .queue import LIVE_REFRESH, WAKE, Row, live_unacked
from .recipients import did_hash

log = logging.getLogger("mediator.didcomm")

# A refused socket closes with 4000 + the HTTP status of its problem report: 4404 no mediator or
# DIDComm off, 4503 suspended or unavailable, 4408 idle; over the connect limit 4029, as /ws.
CLOSE_UNKNOWN_MEDIATOR = 4404  # also any socket path no route serves (mediator_project/asgi.py)
CLOSE_RATE_LIMITED = 4029


def close_code(problem: Problem) -> int:
    """The close code of a socket refused with `problem`."""
    return CLOSE_RATE_LIMITED if problem.status == 429 else 4000 + problem.status


# A live client's push state is revalidated after a push once it is this old (a LIVE_REFRESH lost
# on its way costs at most one push from stale state; a rotated identity still decrypts for hours).
LIVE_STATE_MAX_AGE_S = 60.0
# How many pushed message ids a live client's entry remembers (Live.unsent).
PUSHED_REMEMBERED = 1024


def _frame(raw: bytes, *, host: str, tenant_id: int, remote_addr: str | None, live: bool):
    """One frame, with the socket's tenant as `POST /didcomm` sees it now (the per-process caches):
    (the reply, the close code when the tenant no longer serves DIDComm here, else None). A
    suspended tenant, DIDComm switched off or a deleted tenant is refused by the handler itself
    (nothing executed, the refusal metered), then the socket closes."""
    tenant = tenant_for_host(host)
    if tenant is not None and tenant.pk != tenant_id:
        tenant = None  # the host now falls to another (the default) tenant: ours is gone
    reply = handle(raw, tenant=tenant, transport="ws", remote_addr=remote_addr, live=live)
    try:  # the handler's cached read
        refused = refusal(tenant, tenant is None or not tenant.is_active or accepting_for(tenant=tenant).policy.enabled)
    except DatabaseError:
        return reply, None  # the reply stands; the next frame reads the policy again
    return reply, None if refused is None else close_code(refused)


def _admit(host: str, ip: str | None) -> Tenant:
    """The tenant for `host` if it serves DIDComm and `ip` is within the connect limit; Problem otherwise."""
    tenant = tenant_for_host(host)
    refused = refusal(tenant, tenant is None or not tenant.is_active or policy_for(tenant=tenant).enabled)
    if refused is not None:
        raise refused
    assert tenant is not None  # refusal() refuses an unknown host
    try:
        limits.per_ip("ws_connect", tenant.pk, ip)
    except ProtocolError as err:
        raise Problem(Code.RATE_LIMITED, "too many connections from this address", 429) from err
    return tenant


@dataclass(slots=True)
class Live:
    """A client in live mode on this socket: its group and its push state (None until loaded)."""

    did: str
    kid: str
    group: str
    protocol: str
    # Live because a v1 message asked `return_route: "all"` (implicit pickup), not by live-delivery-change.
    implicit: bool = False
    # The Pickup protocol of its live-delivery-change (None: 3.0 for v2, 2.0 for v1): the pushes'
    # `delivery`; with 4.0 what was queued before is not pushed (its spec: the client asks for it).
    pickup: str | None = None
    target: LiveTarget | None = None
    # Its pushes not yet known to be acknowledged (the ack timeout, live.Awaiting).
    awaiting: Awaiting = field(default_factory=Awaiting)
    # The ids this socket pushed lately (bounded): a message stored while live mode started is in
    # the backlog and in a wake; it goes out once.
    pushed: dict[str, None] = field(default_factory=dict)

    def unsent(self, rows: list[Row]) -> list[Row]:
        """`rows` less those already pushed on this socket; remembers them as pushed."""
        fresh = [row for row in rows if row[0] not in self.pushed]
        for row in fresh:
            self.pushed[row[0]] = None
        while len(self.pushed) > PUSHED_REMEMBERED:
            del self.pushed[next(iter(self.pushed))]
        return fresh


def _rows(wake: dict) -> list[Row] | None:
    """The stored messages a wake carries (`items`), None when it carries none (over 64 KiB)."""
    items = wake.get("items")
    if not isinstance(items, list) or not items:
        return None
    now = timezone.now()
    try:
        return [(str(item["id"]), json.loads(item["data"]), now) for item in items]
    except (KeyError, TypeError, ValueError):
        return None


class DidcommConsumer(LayerLossMixin, AsyncWebsocketConsumer):
    """One DIDComm client socket."""

    async def connect(self) -> None:
        self.tenant: Tenant | None = None
        self.tenant_group: str | None = None
        self.closed = False
        self.observed = False
        self.live: dict[str, Live] = {}  # did hash -> the client in live mode
        # Clients that turned live delivery off on this socket: return routes no longer turn it on.
        self.declined: set[str] = set()
        # The tenant's group and each live client's; re-joined while the socket is open.
        self.memberships = Memberships(self.channel_layer, self.channel_name)
        # Each live client's presence mark (a forward is pushed only to a client that may be live).
        self.presence: Presence | None = None
        headers = dict(self.scope.get("headers") or [])
        host = headers.get(b"host", b"").decode("latin-1")
        client = self.scope.get("client")
        forwarded = headers.get(b"x-forwarded-for")
        self.ip = forwarded_client(client[0] if client else None, forwarded.decode("latin-1") if forwarded else None)
        self.host = host
        await self.accept()
        # Over the process's capacity, at once (apps/realtime/admission.py).
        self.ticket: Ticket | None = GATE.enter()
        if self.ticket is None:
            await self._report(Problem(Code.UNAVAILABLE, f"over capacity: {retry_reason()}", 503))
            self.closed = True
            await self.close(code=OVER_CAPACITY_CLOSE, reason=retry_reason())
            return
        try:
            self.tenant = await db_hop(_admit)(host, self.ip)
        except Problem as problem:
            await self._refuse(problem)
            return
        except DatabaseError:
            await self._refuse(unavailable())
            return
        finally:
            self.ticket.admitted()
        self.budget = SendBudget.for_send(self.base_send, settings.MEDIATOR_WS_SEND_BUDGET_BYTES)
        self.presence = Presence(self.tenant.pk, on_lapse=lambda: self._refuse(unavailable()))
        self.observed = True
        metrics.ACTIVE_CONNECTIONS.inc()
        self._idle_start()
        self._ack_start()
        # The tenant's group: suspended, deleted or DIDComm off, the socket closes (realtime_tenant_state).
        self.tenant_group = tenant_group_name(self.tenant.pk)
        try:
            await self.memberships.add(self.tenant_group)
        except Exception as exc:  # noqa: BLE001 - e.g. Redis down: each frame still finds the tenant's state
            CHANNEL_LAYER.failed(exc, "joining a didcomm tenant group")
            self.tenant_group = None

    async def receive(self, text_data: str | None = None, bytes_data: bytes | None = None) -> None:
        if self.tenant is None or self.closed:
            return
        raw = text_data.encode("utf-8") if text_data is not None else (bytes_data or b"")
        self._ack_nudge()  # each frame also checks what is due (an ack may be among them)
        try:
            reply, close_code = await db_hop(_frame)(
                raw, host=self.host, tenant_id=self.tenant.pk, remote_addr=self.ip, live=bool(self.live)
            )
        except Exception as exc:  # noqa: BLE001 - the host lookup (the handler answers its own errors)
            log_failure(exc, self.tenant)
            await self._report(unavailable())
            return
        if reply.status < 400:
            self.used_at = time.monotonic()  # an accepted frame: the socket is in use
        if reply.body:
            # v1 agents (Credo) send and expect binary frames; v2 clients text.
            await self._send(reply.body if reply.protocol == "v1" else reply.body.decode("utf-8"))
        if close_code is not None:
            await self._close(close_code)
            return
        if (reply.live is None and not reply.implicit) or reply.caller_did is None or self.closed:
            return
        key = did_hash(reply.caller_did)
        if reply.live:
            self.declined.discard(key)
            await self._go_live(key, reply.caller_did, reply.caller_kid, reply.protocol, pickup=reply.pickup)
        elif reply.live is False:
            self.declined.add(key)
            await self._leave(key)
        elif key not in self.live and key not in self.declined:
            await self._go_live(key, reply.caller_did, reply.caller_kid, reply.protocol, implicit=True)

    async def _go_live(
        self, key: str, did: str, kid: str, protocol: str, *, implicit: bool = False, pickup: str | None = None
    ) -> None:
        current = self.live.get(key)
        if current is not None and current.implicit and not implicit:
            current.implicit = False  # now asked for explicitly; its backlog went out already
            return
        assert self.tenant is not None and self.presence is not None  # set by connect() before any frame
        group = group_name(self.tenant.pk, did)
        try:
            await self.memberships.add(group)
        except Exception as exc:  # noqa: BLE001 - e.g. Redis down: no live mode, pickup still works
            CHANNEL_LAYER.failed(exc, "going live on /didcomm/ws")
            return
        # Present after joining and before the backlog (apps/messaging/presence.py).
        try:
            await self.presence.enter(presence_key(key))
        except DatabaseError:
            log.warning("didcomm: database unreachable while going live")
            if key not in self.live:
                await self.memberships.discard(group)
            return
        live = self.live[key] = Live(did, kid, group, protocol, implicit, pickup)
        if current is not None:
            live.awaiting = current.awaiting  # its pushes are still awaited
        # What was queued before live mode started goes out now, once (then each new message);
        # Pickup 4.0 pushes only what arrives from now on.
        await self._load(key, live, backlog=pickup != PICKUP4)

    async def _leave(self, key: str) -> None:
        live = self.live.pop(key, None)
        if live is None:
            return
        assert self.presence is not None  # set by connect() before any client went live
        await self.presence.leave(presence_key(key))
        # A failure is logged and the membership expires by itself; wakes for it are ignored.
        await self.memberships.discard(live.group)

    async def _load(self, key: str, live: Live, *, backlog: bool) -> bool:
        """(Re)load a live client's push state in Channels' sync thread (database); leave live
        mode when its grant is gone. Whether it can push now."""
        try:
            live.target, rows = await db_hop(live_start)(
                tenant=self.tenant,
                protocol=live.protocol,
                client_did=live.did,
                client_kid=live.kid,
                backlog=backlog,
                pickup=live.pickup,
            )
        except DatabaseError:
            # Stay live without state: the next wake loads it again (the messages stay queued).
            log.warning("didcomm: database unreachable while loading a live client")
            live.target = None
            return False
        except DidcommError:
            live.target, rows = None, []  # a client key we cannot encrypt to: no pushes
        if live.target is None:
            await self._leave(key)
            return False
        rows = live.unsent(rows)
        if rows:
            await self._push(live.target.frame(rows))
            self._pushed(live, rows)
        return True

    async def realtime_push(self, event: dict) -> None:
        """A wake-up from apps.realtime.push: a message for one of our live clients was stored
        (queue.WAKE), or its grant or mediator identity changed (queue.LIVE_REFRESH)."""
        try:
            wake = json.loads(event["text"])
        except (KeyError, ValueError):
            return
        kind = wake.get("type")
        if kind not in (WAKE, LIVE_REFRESH):
            return  # a Decentrl push to a group name we share cannot happen (other DID methods)
        group = event.get("group")
        # The client the event was sent to; without `group` (an older sender), every live client
        # of the socket, each reading its own queue.
        for key in [k for k, live in self.live.items() if group is None or live.group == group]:
            live = self.live.get(key)
            if live is None or self.closed:
                continue
            if kind == LIVE_REFRESH:
                await self._load(key, live, backlog=False)
            else:
                await self._wake(key, live, wake, _rows(wake) if group is not None else None)

    async def realtime_tenant_state(self, event: dict) -> None:
        """The tenant was saved or deleted, or its DIDComm policy saved (apps.realtime.push): close
        when it no longer serves DIDComm, as a new connection would be refused (4503 suspended,
        4404 deleted or DIDComm off), after a problem report; the messages stay queued."""
        if self.closed:
            return
        tenant = None if event.get("deleted") else self.tenant
        refused = refusal(tenant, event.get("didcomm") is not False, active=event.get("active") is not False)
        if refused is not None:
            await self._refuse(refused)

    async def _wake(self, key: str, live: Live, wake: dict, rows: list[Row] | None) -> None:
        """Push the woken messages: from the wake itself when it carries them (no database, packed
        here on the event loop), else read from the queue (those still queued)."""
        if live.target is None and not await self._load(key, live, backlog=False):
            return
        target = live.target
        if target is None:  # _load left live mode
            return
        if rows is None:
            try:
                rows = await db_hop(target.backlog)([str(i) for i in wake.get("ids", [])])
            except DatabaseError:
                log.warning("didcomm: database unreachable during a live delivery")
                return
        rows = live.unsent(rows)
        if rows:
            await self._push(target.frame(rows))
            self._pushed(live, rows)
        if time.monotonic() - target.loaded_at > LIVE_STATE_MAX_AGE_S and not self.closed:
            # A LIVE_REFRESH can be lost (the channel layer is best-effort): revalidate now and then.
            await self._load(key, live, backlog=False)

    async def _push(self, frame: str | bytes) -> None:
        if self.closed:
            return
        if self.budget.admits(frame_bytes(frame)):
            await self._send(frame)
            return
        # The client is not reading: a problem report (outside the budget, as /ws's ERROR frame,
        # for a client that starts reading late), then close; the messages stay queued.
        self.closed = True  # at once: a push or a PING meanwhile is not queued behind the report
        log.warning(
            "didcomm websocket closed: send budget exceeded tenant=%s", self.tenant.slug if self.tenant else "-"
        )
        await self._report(Problem(Code.SEND_BUDGET, "send budget exceeded: messages stay queued"))
        # Closed once what is queued left (bounded), or Daphne's reset 1 s after the close would
        # drop the report of a client that reads again late (apps/realtime/sendbudget.py).
        await self.budget.drained()
        await self._close(SEND_BUDGET_CLOSE)

    async def layer_lost(self) -> None:
        """The channel layer is gone (realtime.layerloss): no wakes could reach this socket."""
        if not getattr(self, "closed", False):  # unset when the layer failed before connect()
            await self._refuse(unavailable())

    async def disconnect(self, code: int) -> None:
        self.closed = True
        idle_watch = getattr(self, "idle_watch", None)
        if idle_watch is not None:
            idle_watch.cancel()
        # The ack watch goes on until what this socket pushed is acknowledged or announced.
        self._ack_nudge()
        await self.release_held()
        if getattr(self, "observed", False):
            metrics.ACTIVE_CONNECTIONS.dec()

    async def _send(self, frame: str | bytes) -> None:
        try:
            if isinstance(frame, bytes):
                await self.send(bytes_data=frame)
            else:
                await self.send(text_data=frame)
        except Exception:  # noqa: BLE001 - the peer is already gone (Daphne refuses to send)
            self.closed = True

    async def _report(self, problem: Problem) -> None:
        await self._send(json.dumps(problem_message(problem.code, problem.comment, pthid=None), separators=(",", ":")))

    async def _refuse(self, problem: Problem) -> None:
        await self._report(problem)
        await self._close(close_code(problem))

    async def _close(self, close_code: int) -> None:
        self.closed = True
        await self.close(code=close_code)

    # -- idleness (module docstring) --

    def _in_use(self) -> bool:
        """Whether a client on this socket is live (it needs no frames to stay open)."""
        return bool(self.live)

    def _idle_start(self) -> None:
        self.used_at = time.monotonic()
        self.idle_watch: asyncio.Task | None = None
        if settings.MEDIATOR_DIDCOMM_WS_IDLE_TIMEOUT_S > 0:
            self.idle_watch = asyncio.create_task(self._idle_close())

    async def _idle_close(self) -> None:
        """Close the socket once it was not in use for the idle timeout; its messages stay queued."""
        timeout = settings.MEDIATOR_DIDCOMM_WS_IDLE_TIMEOUT_S
        while not self.closed:
            if self._in_use():
                self.used_at = time.monotonic()
            left = self.used_at + timeout - time.monotonic()
            if left <= 0:
                log.info("didcomm websocket closed: idle tenant=%s", self.tenant.slug if self.tenant else "-")
                await self._refuse(Problem(Code.IDLE, f"no message accepted for {timeout:g} s and not live", 408))
                return
            await asyncio.sleep(left)

    # -- live deliveries are acknowledged (live.Awaiting; docs/didcomm.md) --

    def _ack_start(self) -> None:
        self.ack_event = asyncio.Event()
        self.ack_watch: asyncio.Task | None = None
        if settings.MEDIATOR_DIDCOMM_LIVE_ACK_TIMEOUT_S > 0:
            self.ack_watch = asyncio.create_task(self._ack_loop())

    def _ack_nudge(self) -> None:
        event = getattr(self, "ack_event", None)
        if event is not None:
            event.set()

    def _pushed(self, live: Live, rows: list[Row]) -> None:
        """`rows` went out live: each awaits its messages-received for the ack timeout."""
        timeout = settings.MEDIATOR_DIDCOMM_LIVE_ACK_TIMEOUT_S
        if timeout > 0:
            live.awaiting.pushed([row[0] for row in rows], livemod.clock(), timeout)
            self._ack_nudge()

    async def _ack_loop(self) -> None:
        """Wait for the next push's deadline (or a nudge: a push, a frame, the close), then check
        what is due. Once the socket closed, what it pushed is still checked (announced, not pushed
        again) at its deadline; then the watch ends."""
        while True:
            deadline = min(
                (d for live in self.live.values() if (d := live.awaiting.next_deadline()) is not None), default=None
            )
            if deadline is None and self.closed:
                return
            wait = None if deadline is None else deadline - livemod.clock()
            if wait is not None and wait <= 0:
                await self._ack_check()
                continue
            self.ack_event.clear()
            try:
                await asyncio.wait_for(self.ack_event.wait(), wait)
            except TimeoutError:
                pass

    async def _ack_check(self) -> None:
        """The due pushes of each live client: those still queued are announced
        (queue.live_unacknowledged) and pushed again while the socket is open (live.LIVE_RESENDS);
        acknowledged ones are forgotten."""
        assert self.tenant is not None  # the watch starts once connect() admitted the socket
        timeout = settings.MEDIATOR_DIDCOMM_LIVE_ACK_TIMEOUT_S
        now = livemod.clock()
        for live in list(self.live.values()):
            due = live.awaiting.due(now)
            if not due:
                continue
            target = live.target
            try:
                if target is None:
                    raise DatabaseError("no push state")  # not loaded (the database was down): later
                unacked = await db_hop(live_unacked)(
                    tenant_id=self.tenant.pk, mediation_id=target.mediation_id, client_did=live.did, ids=due
                )
            except DatabaseError:
                live.awaiting.postpone(due, now + timeout)
                continue
            again = live.awaiting.settle(due, unacked, resend=not self.closed)
            if again:
                await self._push(target.frame(again))
                self._pushed(live, again)
