"""The DIDComm v2 WebSocket (`/didcomm/ws`): an async shell over the one message path (STYLE §10).

Frames in are packed DIDComm messages (text or binary), handled exactly as `POST /didcomm`;
answers (return_route) and problem reports go back on the socket as text frames. A
live-delivery-change from an authcrypt client puts the socket in that client's channel-layer
group (per (tenant, DID), any number of sockets across processes); each stored message then
wakes it, and it pushes a packed Pickup 3.0 `delivery` within the socket's send budget
(apps/realtime/sendbudget.py; over it the socket closes with 4509). A push is never the only
copy: messages leave the queue only on messages-received, TTL or eviction.
"""

from __future__ import annotations

import json
import logging

from channels.db import database_sync_to_async
from channels.generic.websocket import AsyncWebsocketConsumer
from django.conf import settings
from django.db import DatabaseError

from apps.ops.clientip import forwarded_client
from apps.realtime.groups import group_name
from apps.realtime.sendbudget import CLOSE_CODE as SEND_BUDGET_CLOSE
from apps.realtime.sendbudget import SendBudget, frame_bytes
from apps.tenants.selectors import tenant_for_host

from . import dispatch_v1, metrics, services
from .dispatch import handle, live_delivery_frame, problem_message
from .models import did_hash
from .problems import Problem
from .protocols import Code

log = logging.getLogger("mediator.didcomm")

CLOSE_UNKNOWN_MEDIATOR = 4404
CLOSE_UNAVAILABLE = 4503


def _admit(host: str):
    """The tenant for `host` if it serves DIDComm; Problem otherwise."""
    tenant = tenant_for_host(host)
    if tenant is None:
        raise Problem(Code.UNKNOWN_MEDIATOR, "no mediator at this host", CLOSE_UNKNOWN_MEDIATOR)
    if not tenant.is_active:
        raise Problem(Code.UNAVAILABLE, "mediator suspended", CLOSE_UNAVAILABLE)
    if not services.policy_for(tenant=tenant).enabled:
        raise Problem(Code.UNKNOWN_MEDIATOR, "DIDComm is not enabled on this mediator", CLOSE_UNKNOWN_MEDIATOR)
    return tenant


class DidcommConsumer(AsyncWebsocketConsumer):
    """One DIDComm client socket."""

    async def connect(self) -> None:
        self.tenant = None
        self.closed = False
        self.observed = False
        self.live: dict[str, tuple[str, str, str, str]] = {}  # did hash -> (did, kid, group, protocol)
        headers = dict(self.scope.get("headers") or [])
        host = headers.get(b"host", b"").decode("latin-1")
        client = self.scope.get("client")
        forwarded = headers.get(b"x-forwarded-for")
        self.ip = forwarded_client(client[0] if client else None, forwarded.decode("latin-1") if forwarded else None)
        await self.accept()
        try:
            self.tenant = await database_sync_to_async(_admit)(host)
        except Problem as problem:
            await self._refuse(problem.code, problem.comment, problem.status)
            return
        except DatabaseError:
            await self._refuse(Code.UNAVAILABLE, "mediator unavailable", CLOSE_UNAVAILABLE)
            return
        self.budget = SendBudget.for_send(self.base_send, settings.MEDIATOR_WS_SEND_BUDGET_BYTES)
        self.observed = True
        metrics.ACTIVE_CONNECTIONS.inc()

    async def receive(self, text_data: str | None = None, bytes_data: bytes | None = None) -> None:
        if self.tenant is None or self.closed:
            return
        raw = text_data.encode("utf-8") if text_data is not None else (bytes_data or b"")
        # Two front doors to one mediator: an RFC 0019 envelope goes the v1 way, anything else v2.
        handler = dispatch_v1.handle if dispatch_v1.is_v1(raw) else handle
        reply = await database_sync_to_async(handler)(
            raw, tenant=self.tenant, transport="ws", remote_addr=self.ip, live=bool(self.live)
        )
        if reply.body:
            # v1 agents (Credo) send and expect binary frames; v2 clients text.
            await self._send(reply.body if reply.protocol == "v1" else reply.body.decode("utf-8"))
        if reply.live is None or reply.caller_did is None or self.closed:
            return
        key = did_hash(reply.caller_did)
        if reply.live:
            await self._go_live(key, reply.caller_did, reply.caller_kid, reply.protocol)
        elif key in self.live:
            group = self.live.pop(key)[2]
            await self.channel_layer.group_discard(group, self.channel_name)

    async def _go_live(self, key: str, did: str, kid: str, protocol: str) -> None:
        group = group_name(self.tenant.pk, did)
        try:
            await self.channel_layer.group_add(group, self.channel_name)
        except Exception:  # noqa: BLE001 - e.g. Redis down: no live mode, pickup still works
            log.warning("didcomm: channel layer unreachable while going live")
            return
        self.live[key] = (did, kid, group, protocol)
        # What was queued before live mode started goes out now, once (then each new message).
        await self._deliver(key, None)

    async def realtime_push(self, event: dict) -> None:
        """A wake-up from apps.realtime.push: a message for one of our live clients was stored."""
        try:
            wake = json.loads(event["text"])
        except (KeyError, ValueError):
            return
        if wake.get("type") != services.WAKE:
            return  # a Decentrl push to a group name we share cannot happen (other DID methods)
        for key in list(self.live):
            await self._deliver(key, [str(i) for i in wake.get("ids", [])])

    async def _deliver(self, key: str, ids: list[str] | None) -> None:
        entry = self.live.get(key)
        if entry is None or self.closed:
            return
        did, kid, _, protocol = entry
        build = dispatch_v1.live_delivery_frame if protocol == "v1" else live_delivery_frame
        try:
            frame = await database_sync_to_async(build)(tenant=self.tenant, client_did=did, client_kid=kid, ids=ids)
        except DatabaseError:
            log.warning("didcomm: database unreachable during a live delivery")
            return
        if frame is None:
            return
        if self.budget.admits(frame_bytes(frame)):
            await self._send(frame)
            return
        # The client is not reading: a problem report (outside the budget, as /ws's ERROR frame,
        # for a client that starts reading late), then close; the messages stay queued.
        log.warning("didcomm websocket closed: send budget exceeded tenant=%s", self.tenant.slug)
        await self._refuse(Code.SEND_BUDGET, "send budget exceeded: messages stay queued", SEND_BUDGET_CLOSE)

    async def disconnect(self, code: int) -> None:
        self.closed = True
        if getattr(self, "budget", None):
            self.budget.release()
        for _, _, group, _ in getattr(self, "live", {}).values():
            try:
                await self.channel_layer.group_discard(group, self.channel_name)
            except Exception:  # noqa: BLE001 - the membership expires by itself
                log.warning("didcomm: channel layer unreachable while leaving a group")
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

    async def _refuse(self, code: str, comment: str, close_code: int) -> None:
        await self._send(json.dumps(problem_message(code, comment, pthid=None), separators=(",", ":")))
        self.closed = True
        await self.close(code=close_code)
