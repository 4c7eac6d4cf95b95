"""The `/ws` consumer (DCTRL-0004 §10): an async shell over sync services (docs/contributing.md §10).

It is a plain AsyncWebsocketConsumer, not the JSON one, so that the AUTHENTICATE signature is
checked over what was received (docs/contributing.md §8). Life of a socket:

  connect    accept, the process's capacity (apps/realtime/admission.py: over it ERROR
             MEDIATOR_UNAVAILABLE and close 1013 at once), tenant from Host, the per-IP connect
             limit, start the auth timer
  receive    first frame must be AUTHENTICATE (§10.2 order, AUTH_FAILED + close 4001-4008),
             then: join the (tenant, DID) group, mark the DID present (messaging/presence.py:
             stored events are pushed only to a DID with a socket), AUTH_SUCCESS, the
             unacknowledged backlog in PENDING_EVENTS batches, a PING every
             MEDIATOR_WS_PING_INTERVAL_S; the presence renewed every third of its lease
  disconnect presence released, then the groups left
  push       group messages from apps.realtime.push, sent as they are, within the socket's
             send budget (apps/realtime/sendbudget.py); the backlog waits for room instead
  afterwards PONG is accepted, anything else is ignored

Close codes beyond §10.3 (documented in docs/realtime.md), each after an {"type":"ERROR"} frame:
4029 RATE_LIMITED (the per-IP connect or AUTHENTICATE limit), 4404 UNKNOWN_MEDIATOR,
4503 MEDIATOR_UNAVAILABLE (tenant suspended, database or channel layer unreachable), 4509 SEND_BUDGET_EXCEEDED
(a push found more than MEDIATOR_WS_SEND_BUDGET_BYTES unsent: the client is not reading).
Over the process's capacity: ERROR MEDIATOR_UNAVAILABLE and close 1013 (Try Again Later) whose
reason says when.

Every accepted socket is in its tenant's group (realtime.groups.tenant_group_name): when the tenant
is suspended it gets ERROR MEDIATOR_UNAVAILABLE and close 4503, when deleted ERROR UNKNOWN_MEDIATOR
and 4404, the answers a new connection gets (realtime.push.TENANT_STATE_TYPE).
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Callable, Coroutine
from typing import Any

from channels.generic.websocket import AsyncWebsocketConsumer
from django.conf import settings
from django.db import DatabaseError

from apps.messaging.services import pending_events_unacked
from apps.ops import limits, metrics
from apps.ops.clientip import forwarded_client
from apps.realtime.admission import CLOSE_CODE as OVER_CAPACITY_CLOSE
from apps.realtime.admission import GATE, Ticket, db_hop, retry_reason
from apps.realtime.groups import Memberships, group_name, tenant_group_name
from apps.realtime.layerloss import CHANNEL_LAYER, LayerLossMixin
from apps.realtime.presence import Presence
from apps.realtime.sendbudget import CLOSE_CODE as SEND_BUDGET_CLOSE
from apps.realtime.sendbudget import ERROR_CODE as SEND_BUDGET_ERROR
from apps.realtime.sendbudget import SendBudget, frame_bytes
from apps.tenants.models import Tenant
from apps.tenants.selectors import tenant_for_host
from apps.wire.canonical import canonical_str
from apps.wire.errors import ErrorCode, ProtocolError

from .auth import WsAuthFailed, authenticate, check_timestamp, parse_authenticate
from .dispatch import Outcome, observe

log = logging.getLogger("mediator.realtime")

# Extension close codes for refusals that are not AUTHENTICATE failures.
EXTRA_CLOSE_CODES: dict[ErrorCode, int] = {
    ErrorCode.RATE_LIMITED: 4029,
    ErrorCode.UNKNOWN_MEDIATOR: 4404,
    ErrorCode.MEDIATOR_UNAVAILABLE: 4503,
}
DEFAULT_REFUSAL_CLOSE = 4400

# Backlog: rows read per query, and the largest PENDING_EVENTS frame we build on purpose
# (a single bigger event still goes alone in its own frame).
BACKLOG_ROWS_PER_QUERY = 50
BACKLOG_FRAME_BYTES = 1024 * 1024

NEW, AUTHENTICATING, AUTHENTICATED, CLOSED = "new", "authenticating", "authenticated", "closed"


def _now_ms() -> int:
    return int(time.time() * 1000)


def _observe(event: str, tenant: Tenant | None) -> None:
    metrics.observe_ws(event, tenant.slug if tenant else None)


def _admit(host: str, ip: str | None) -> Tenant:
    """Resolve the tenant for `host` and run the connect checks; ProtocolError to refuse."""
    tenant = tenant_for_host(host)
    if tenant is None:
        raise ProtocolError(ErrorCode.UNKNOWN_MEDIATOR)
    if not tenant.is_active:
        raise ProtocolError(ErrorCode.MEDIATOR_UNAVAILABLE)
    limits.per_ip("ws_connect", tenant.pk, ip)
    return tenant


def _authenticate(tenant: Tenant, ip: str | None, text: str | None) -> str:
    """WS_AUTH_CHECKS, then §10.2 in order; one thread hop for the whole AUTHENTICATE, metered."""
    started = time.perf_counter()
    verified: str | None = None  # the DID, once its signature verified (never a mere claim)
    code, status = "SUCCESS", 200
    try:
        limits.per_ip("ws_auth", tenant.pk, ip)
        frame = parse_authenticate(text)
        now_ms = _now_ms()
        window = settings.MEDIATOR_TIMESTAMP_WINDOW_MS
        check_timestamp(frame, now_ms=now_ms, window_ms=window)
        verified = authenticate(tenant=tenant, frame=frame, now_ms=now_ms, window_ms=window)
        return verified
    except WsAuthFailed as failed:
        code, status = failed.code, failed.close_code
        if failed.sender_verified:
            verified = frame.did
        raise
    except ProtocolError as err:
        code, status = err.code.value, EXTRA_CLOSE_CODES.get(err.code, DEFAULT_REFUSAL_CLOSE)
        raise
    except DatabaseError:
        code, status = ErrorCode.MEDIATOR_UNAVAILABLE.value, EXTRA_CLOSE_CODES[ErrorCode.MEDIATOR_UNAVAILABLE]
        raise
    finally:
        _meter_authenticate(tenant, ip, text, verified, code, status, started)


def _meter_authenticate(
    tenant: Tenant, ip: str | None, text: str | None, did: str | None, code: str, status: int, started: float
) -> None:
    """AUTHENTICATE is the one command a socket sends: the same metadata-only record as POST /
    commands (usage metering, metrics). `http_status` carries 200 or the close code; `did` is
    the verified DID or None."""
    reply = {"type": "AUTH_SUCCESS"} if code == "SUCCESS" else {"type": "AUTH_FAILED", "code": code}
    outcome = Outcome(status, reply, "AUTHENTICATE", did, code)
    bytes_in, bytes_out = len((text or "").encode("utf-8")), len(canonical_str(reply))
    observe(tenant, "ws", outcome, bytes_in, bytes_out, (time.perf_counter() - started) * 1000, ip)


def _backlog_frames(rows: list[dict]) -> list[str]:
    """PENDING_EVENTS frames (§10.5) for backlog rows, each at most BACKLOG_FRAME_BYTES if possible."""
    frames: list[str] = []
    batch: list[dict] = []
    size = 0
    for row in rows:
        item = {"id": row["id"], "sender_did": row["sender_did"], "payload": row["payload"]}
        item_size = len(row["payload"]) + len(row["sender_did"]) + 80
        if batch and size + item_size > BACKLOG_FRAME_BYTES:
            frames.append(canonical_str({"type": "PENDING_EVENTS", "events": batch}))
            batch, size = [], 0
        batch.append(item)
        size += item_size
    if batch:
        frames.append(canonical_str({"type": "PENDING_EVENTS", "events": batch}))
    return frames


class SocketConsumer(LayerLossMixin, AsyncWebsocketConsumer):
    """One client socket on `/ws`."""

    async def connect(self) -> None:
        self.state = NEW
        self.tenant: Tenant | None = None
        self.did: str | None = None
        self.group: str | None = None
        self.tenant_group: str | None = None
        self.presence: Presence | None = None  # the DID's presence mark, once authenticated
        self.observed = False
        # The socket's one pending timer (the AUTHENTICATE deadline, then the next PING) and the
        # tasks of timers that fired and still run: an idle socket holds a timer handle, no task.
        self.timer: asyncio.TimerHandle | None = None
        self.tasks: set[asyncio.Task] = set()
        self.ticket: Ticket | None = None
        # The tenant's group from here, the DID's after AUTHENTICATE; re-joined while open.
        self.memberships = Memberships(self.channel_layer, self.channel_name)
        headers = dict(self.scope.get("headers") or [])
        host = headers.get(b"host", b"").decode("latin-1")
        client = self.scope.get("client")
        # Behind the proxies in MEDIATOR_TRUSTED_PROXIES (the layout's nginx), the client is the
        # right-most untrusted X-Forwarded-For hop, as for POST / (apps/decentrl/views.py).
        forwarded = headers.get(b"x-forwarded-for")
        self.ip = forwarded_client(client[0] if client else None, forwarded.decode("latin-1") if forwarded else None)
        # Accepted before anything waits, so that the answer is always the protocol's own
        # (apps/realtime/admission.py); over the process's capacity, at once.
        await self.accept()
        self.ticket = GATE.enter()
        if self.ticket is None:
            await self._send_json({"type": "ERROR", "code": ErrorCode.MEDIATOR_UNAVAILABLE.value})
            await self._close(OVER_CAPACITY_CLOSE, retry_reason())
            return
        try:
            self.tenant = await db_hop(_admit)(host, self.ip)
        except ProtocolError as err:
            await self._refuse(err.code)
            return
        except DatabaseError:
            log.warning("database unreachable while admitting a websocket")
            await self._refuse(ErrorCode.MEDIATOR_UNAVAILABLE)
            return
        self.budget = SendBudget.for_send(self.base_send, settings.MEDIATOR_WS_SEND_BUDGET_BYTES)
        self.observed = True
        _observe("connect", self.tenant)
        # The tenant's group: a suspended or deleted tenant's sockets close (realtime_tenant_state).
        try:
            await self.memberships.add(tenant_group_name(self.tenant.pk))
            self.tenant_group = tenant_group_name(self.tenant.pk)
        except Exception as exc:  # noqa: BLE001 - Redis down: AUTHENTICATE refuses the socket anyway
            CHANNEL_LAYER.failed(exc, "joining a tenant group")
        self._later(settings.MEDIATOR_WS_AUTH_TIMEOUT_S, self._auth_timeout)

    async def receive(self, text_data: str | None = None, bytes_data: bytes | None = None) -> None:
        if self.state == AUTHENTICATED:
            # §10.4: PONG is accepted; nothing else is defined after authentication, so other
            # frames are ignored (commands go over POST /).
            return
        if self.state != NEW:
            return
        tenant = self.tenant
        assert tenant is not None and self.ticket is not None  # connect() admitted both
        self.state = AUTHENTICATING
        self._cancel_timer()
        try:
            admitted = await self._admit_did(tenant, text_data)
        finally:
            self.ticket.admitted()
        if not admitted:
            return
        try:
            await self._send_backlog()
        except DatabaseError:
            # The socket stays up and live pushes still arrive; the client can QUERY later.
            log.warning("database unreachable while sending the websocket backlog")
        if self.state == AUTHENTICATED:
            self._later(settings.MEDIATOR_WS_PING_INTERVAL_S, self._ping)

    async def _admit_did(self, tenant: Tenant, text_data: str | None) -> bool:
        """AUTHENTICATE (§10.2), the DID's group and presence, then AUTH_SUCCESS; False when the
        socket was refused (or left meanwhile)."""
        try:
            did = await db_hop(_authenticate)(tenant, self.ip, text_data)
        except WsAuthFailed as failed:
            await self._auth_failed(failed.code, failed.close_code)
            return False
        except ProtocolError as err:
            await self._auth_failed(err.code.value, EXTRA_CLOSE_CODES.get(err.code, DEFAULT_REFUSAL_CLOSE))
            return False
        except DatabaseError:
            log.warning("database unreachable during websocket authentication")
            await self._auth_unavailable()
            return False
        if self.state == CLOSED:  # the client left while we were checking
            return False
        self.did = did
        self.group = group_name(tenant.pk, did)
        # Join before reading the backlog: an event stored from here on is pushed to us, one
        # stored before is in the backlog. An event in both arrives twice, which is harmless
        # (a push is a wake-up; clients dedupe by id and ACK).
        try:
            await self.memberships.add(self.group)
        except Exception as exc:  # noqa: BLE001 - e.g. Redis down: a socket that cannot get pushes is refused
            CHANNEL_LAYER.failed(exc, "joining a websocket group")
            self.group = None
            await self._auth_unavailable()
            return False
        # Present after joining and before the backlog (messaging/presence.py says why this order
        # is exact). A socket that cannot be marked present would miss pushes: refused like one
        # without a group. Renewed while open; if it cannot be, the socket closes (4503).
        self.presence = Presence(tenant.pk, on_lapse=lambda: self._refuse(ErrorCode.MEDIATOR_UNAVAILABLE))
        try:
            await self.presence.enter(did)
        except DatabaseError:
            log.warning("database unreachable while marking a websocket present")
            await self.memberships.discard(self.group)
            self.group = None
            await self._auth_unavailable()
            return False
        self.state = AUTHENTICATED
        await self._send_json({"type": "AUTH_SUCCESS"})
        _observe("authenticated", self.tenant)
        return True

    async def realtime_push(self, event: dict) -> None:
        """A push from apps.realtime.push: already-serialised PENDING_EVENTS or CONTRACTS_UPDATED."""
        if self.state == AUTHENTICATED:
            await self._push(event["text"])

    async def realtime_tenant_state(self, event: dict) -> None:
        """The tenant was saved or deleted (apps.realtime.push): close when it no longer serves, as
        a new connection would be refused; pending events stay for the next AUTHENTICATE."""
        if self.state == CLOSED:
            return
        if event.get("deleted"):
            await self._refuse(ErrorCode.UNKNOWN_MEDIATOR)
        elif event.get("active") is False:
            await self._refuse(ErrorCode.MEDIATOR_UNAVAILABLE)

    async def layer_lost(self) -> None:
        """The channel layer is gone (realtime.layerloss): no pushes could reach this socket."""
        if getattr(self, "state", NEW) != CLOSED:  # NEW too when the layer failed before connect()
            await self._refuse(ErrorCode.MEDIATOR_UNAVAILABLE)

    async def disconnect(self, code: int) -> None:
        self.state = CLOSED
        self._cancel_timer()
        for task in list(getattr(self, "tasks", ())):
            task.cancel()
        await self.release_held()
        if getattr(self, "observed", False):
            _observe("disconnect", self.tenant)

    # -- internals --

    async def _send_json(self, message: dict) -> None:
        await self._send_text(canonical_str(message))

    async def _send_text(self, text: str) -> bool:
        """Send one frame; False (and the socket counts as closed) if the peer is already gone.

        The server may learn that the TCP connection died before our disconnect handler runs,
        and then refuses to send (Daphne raises); a ping or push in that window is just dropped.
        """
        try:
            await self.send(text_data=text)
        except Exception:  # noqa: BLE001 - the server's "closed protocol" error type is its own
            self.state = CLOSED
            return False
        return True

    async def _push(self, text: str) -> None:
        """Send a frame the server pushes (an event, a PING) within the send budget. Over it, the
        socket is closed: the client is not reading, and the events stay pending for its next
        AUTHENTICATE (a push is a wake-up, never the only copy)."""
        if self.budget.admits(frame_bytes(text)):
            await self._send_text(text)
            return
        # At once, so that a PING and a push over budget together close the socket only once.
        self.state = CLOSED
        log.warning(
            "websocket closed: send budget exceeded tenant=%s unsent=%d budget=%d",
            self.tenant.slug if self.tenant is not None else "-",
            self.budget.unsent(),
            self.budget.limit,
        )
        _observe("send_budget_exceeded", self.tenant)
        await self._send_json({"type": "ERROR", "code": SEND_BUDGET_ERROR})
        # The ERROR frame is queued behind up to a budget of unsent bytes: close once they left
        # (bounded), or Daphne's reset 1 s after the close would drop it (sendbudget.py).
        await self.budget.drained()
        await self._close(SEND_BUDGET_CLOSE)

    async def _close(self, code: int, reason: str | None = None) -> None:
        self.state = CLOSED
        await self.close(code=code, reason=reason)

    async def _refuse(self, code: ErrorCode) -> None:
        await self._send_json({"type": "ERROR", "code": code.value})
        await self._close(EXTRA_CLOSE_CODES.get(code, DEFAULT_REFUSAL_CLOSE))

    async def _auth_failed(self, code: str, close_code: int) -> None:
        await self._send_json({"type": "AUTH_FAILED", "code": code})
        await self._close(close_code)

    async def _auth_unavailable(self) -> None:
        """AUTH_FAILED MEDIATOR_UNAVAILABLE and its close code (4503): what the socket needs to take
        pushes (the database, the channel layer) is not there."""
        await self._auth_failed(ErrorCode.MEDIATOR_UNAVAILABLE.value, EXTRA_CLOSE_CODES[ErrorCode.MEDIATOR_UNAVAILABLE])

    def _later(self, delay: float, run: Callable[[], Coroutine[Any, Any, None]]) -> None:
        """Run `run()` in `delay` s (replacing the pending timer): a timer handle while it waits,
        a task only once it fires."""
        self._cancel_timer()
        self.timer = asyncio.get_running_loop().call_later(delay, self._fire, run)

    def _fire(self, run: Callable[[], Coroutine[Any, Any, None]]) -> None:
        self.timer = None
        if self.state != CLOSED:
            task = asyncio.get_running_loop().create_task(run())
            self.tasks.add(task)
            task.add_done_callback(self.tasks.discard)

    def _cancel_timer(self) -> None:
        timer = getattr(self, "timer", None)
        if timer is not None:
            timer.cancel()
            self.timer = None

    async def _auth_timeout(self) -> None:
        """§10.1: AUTHENTICATE must arrive within the timeout, else AUTH_TIMEOUT and close 4001."""
        # Only a socket that sent nothing is timed out: one whose frame arrived in time is
        # being checked and gets its own answer.
        if self.state == NEW:
            await self._auth_failed("AUTH_TIMEOUT", 4001)

    async def _ping(self) -> None:
        """§10.4: a PING every interval while authenticated."""
        if self.state != AUTHENTICATED:
            return
        await self._push(canonical_str({"type": "PING", "timestamp": _now_ms()}))
        if self.state == AUTHENTICATED:
            self._later(settings.MEDIATOR_WS_PING_INTERVAL_S, self._ping)

    async def _send_backlog(self) -> None:
        """docs/protocol-readings.md §6: the DID's unacknowledged pending events, in batches."""
        after_id = 0
        while self.state == AUTHENTICATED:
            rows = await db_hop(pending_events_unacked)(
                tenant=self.tenant, did=self.did, limit=BACKLOG_ROWS_PER_QUERY, after_id=after_id
            )
            if not rows:
                return
            for frame in _backlog_frames(rows):
                # The backlog is read at the server's pace, so it waits for the client to take
                # what is queued instead of closing the socket (apps/realtime/sendbudget.py).
                if self.state != AUTHENTICATED or not await self.budget.room_for(frame_bytes(frame)):
                    return
                if not await self._send_text(frame):
                    return
            if len(rows) < BACKLOG_ROWS_PER_QUERY:
                return
            after_id = rows[-1]["seq"]
