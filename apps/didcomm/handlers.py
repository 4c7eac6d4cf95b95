"""DIDComm v2 protocol handlers: one function per message type, (Context, PlainMessage) -> Outcome
(the forward of both versions is forward.py's), and the rules v1's handlers share (recipient
updates, Pickup's checks).

Bodies are validated here, at the edge, into stable problem codes; the writes are services.
"""

from __future__ import annotations

import json
import logging
from collections.abc import Callable

from apps.didcomm.core.message import PlainMessage
from apps.didcomm.core.resolver import authentication_key, key_agreement_key

from . import devices, metrics, protocols
from .forward import forward
from .mediation import RecipientRefused, mediation_for, mediation_request, recipient_of_client, recipients_page
from .mediation import recipients_update as _recipients_update
from .models import Mediation, RecipientKey
from .problems import Outcome, Problem
from .protocols import (
    CM2,
    CM3,
    DISCOVER,
    FORWARD,
    PICKUP,
    PICKUP4,
    PUSH_APNS,
    PUSH_FCM,
    REPORT_PROBLEM,
    TRUST_PING,
    Code,
)
from .queue import Figures, epoch_ms, messages_batch, messages_figures, messages_received, messages_status
from .recipients import key_forms

log = logging.getLogger("mediator.didcomm")

MAX_DELIVERY_LIMIT = 100
MAX_PAGE = 100
MAX_UPDATES = 100
# A stored attachment's text: compact JSON of what a client sent (parsed JSON: never circular).
_compact_json = json.JSONEncoder(separators=(",", ":"), check_circular=False).encode


def _require_caller(ctx) -> str:
    if ctx.caller_did is None:
        raise Problem(Code.UNAUTHENTICATED, "this message must be authcrypt (ECDH-1PU)", 401)
    return ctx.caller_did


def _granted(ctx) -> Mediation:
    client = _require_caller(ctx)
    mediation = mediation_for(tenant=ctx.tenant, client_did=client)
    if mediation is None:
        raise Problem(Code.NOT_GRANTED, "no mediation granted to this DID", 403)
    return mediation


# --- coordinate-mediation 2.0 and 3.0 (one store) -----------------------------------------------


def mediate_request(ctx, msg: PlainMessage) -> Outcome:
    client = _require_caller(ctx)
    base = CM3 if msg.type.startswith(CM3) else CM2
    mediation = mediation_request(tenant=ctx.tenant, client_did=client)
    if mediation.state != Mediation.State.GRANTED:
        return Outcome({"type": base + "mediate-deny", "body": {}})
    # CM 2.0: routing_did is one DID string; CM 3.0: a list of DIDs.
    # The DID the client addressed: a client of the legacy DID can resolve only that one.
    routing = ctx.mediator_did if base == CM2 else [ctx.mediator_did]
    return Outcome({"type": base + "mediate-grant", "body": {"routing_did": routing}})


def recipient_update(ctx, msg: PlainMessage) -> Outcome:
    mediation = _granted(ctx)
    base = CM3 if msg.type.startswith(CM3) else CM2
    updates = update_list(msg.body.get("updates"))
    results = recipients_update(mediation, updates, proof=_proof(ctx))
    answer = "keylist-update-response" if base == CM2 else "recipient-update-response"
    updated = [{"recipient_did": r.recipient_did, "action": r.action, "result": r.result} for r in results]
    return Outcome({"type": base + answer, "body": {"updated": updated}})


def update_list(updates: object) -> list[dict]:
    """A recipient update's entries, v1 and v2: a list of at most MAX_UPDATES objects."""
    if not isinstance(updates, list) or not all(isinstance(u, dict) for u in updates):
        raise Problem(Code.BAD_BODY, "updates must be a list of objects")
    if len(updates) > MAX_UPDATES:
        raise Problem(Code.BAD_BODY, f"at most {MAX_UPDATES} updates per message")
    return updates


def _proof(ctx) -> frozenset[tuple[str, bytes]]:
    """The keys the request was authcrypted with (the caller's `skid`) and signed with, if signed."""
    keys = [key_agreement_key(ctx.caller_kid)]
    if ctx.signer_kid is not None:
        keys.append(authentication_key(ctx.signer_kid))
    return key_forms([k for k in keys if k is not None])


def recipients_update(mediation: Mediation, updates: list, *, proof) -> list:
    """A recipient update, v1 and v2: the service's results, or the problem report of its refusal."""
    try:
        return _recipients_update(mediation=mediation, updates=updates, proof=proof)
    except RecipientRefused as refused:
        where = f"updates[{refused.index}]"
        if refused.reason == RecipientRefused.CONFLICT:
            raise Problem(
                Code.RECIPIENT_CONFLICT, f"{where}: this DID is registered to another client of this mediator", 409
            ) from None
        raise Problem(
            Code.RECIPIENT_UNPROVEN,
            f"{where}: this mediator registers this DID only in a request authcrypted or signed with one of its keys",
            403,
        ) from None


def _paginate(body: dict) -> tuple[int, int]:
    page = body.get("paginate")
    if page is None:
        return MAX_PAGE, 0
    if not isinstance(page, dict):
        raise Problem(Code.BAD_BODY, "paginate must be an object")
    limit, offset = page.get("limit", MAX_PAGE), page.get("offset", 0)
    for value in (limit, offset):
        if isinstance(value, bool) or not isinstance(value, int) or value < 0:
            raise Problem(Code.BAD_BODY, "paginate limit and offset must be non-negative integers")
    return min(limit, MAX_PAGE), offset


def recipient_query(ctx, msg: PlainMessage) -> Outcome:
    mediation = _granted(ctx)
    base = CM3 if msg.type.startswith(CM3) else CM2
    limit, offset = _paginate(msg.body)
    dids, total = recipients_page(mediation=mediation, limit=limit, offset=offset)
    pagination = {"count": len(dids), "offset": offset, "remaining": max(0, total - offset - len(dids))}
    if base == CM2:
        body = {"keys": [{"recipient_did": d} for d in dids], "pagination": pagination}
        return Outcome({"type": CM2 + "keylist", "body": body})
    body = {"dids": [{"recipient_did": d} for d in dids], "pagination": pagination}
    return Outcome({"type": CM3 + "recipient", "body": body})


# --- messagepickup/3.0 --------------------------------------------------------------------------


def pickup_recipient(mediation: Mediation, did: str, refusal: str) -> RecipientKey:
    """Pickup's recipient scope, v1 and v2: one of the client's own recipients, by any form of its DID."""
    recipient = recipient_of_client(mediation=mediation, recipient_did=did)
    if recipient is None:
        raise Problem(Code.NOT_FOUND, refusal)
    return recipient


def pickup_limit(value: object, field: str = "limit") -> int:
    """Pickup's batch size, v1 and v2: a positive integer, at most MAX_DELIVERY_LIMIT."""
    if isinstance(value, bool) or not isinstance(value, int) or value < 1:
        raise Problem(Code.BAD_BODY, f"{field} must be a positive integer")
    return min(value, MAX_DELIVERY_LIMIT)


def pickup_received(ctx, mediation: Mediation, ids: object) -> None:
    """messages-received, v1 and v2: the listed messages leave the client's queue."""
    if not isinstance(ids, list) or not all(isinstance(i, str) for i in ids) or len(ids) > 1000:
        raise Problem(Code.BAD_BODY, "message_id_list must be a list of at most 1000 ids")
    removed = messages_received(mediation=mediation, ids=ids)
    metrics.DELIVERED.inc(removed)
    ctx.extra["removed"] = removed


def pickup_live(ctx, value: object) -> bool:
    """live-delivery-change, v1 and v2: the new state, on a socket only (HTTP has no connection to deliver on)."""
    if not isinstance(value, bool):
        raise Problem(Code.BAD_BODY, "live_delivery must be true or false")
    if ctx.live is None:
        raise Problem(Code.LIVE_NOT_SUPPORTED, "live delivery needs the DIDComm WebSocket")
    return value


def _pickup_scope(ctx, msg: PlainMessage):
    mediation = _granted(ctx)
    recipient_did = msg.body.get("recipient_did")
    if recipient_did is None:
        return mediation, None, None
    if not isinstance(recipient_did, str):
        raise Problem(Code.BAD_BODY, "recipient_did must be a string")
    return (
        mediation,
        pickup_recipient(mediation, recipient_did, "recipient_did is not one of this client's recipients"),
        recipient_did,
    )


def _status(ctx, mediation, recipient, recipient_did, *, live: bool | None = None) -> dict:
    body = messages_status(mediation=mediation, recipient=recipient)
    if recipient_did is not None:
        body = {"recipient_did": recipient_did, **body}
    body["live_delivery"] = bool(ctx.live) if live is None else live
    return {"type": PICKUP + "status", "body": body}


def status_request(ctx, msg: PlainMessage) -> Outcome:
    mediation, recipient, recipient_did = _pickup_scope(ctx, msg)
    return Outcome(_status(ctx, mediation, recipient, recipient_did))


def delivery_request(ctx, msg: PlainMessage) -> Outcome:
    mediation, recipient, recipient_did = _pickup_scope(ctx, msg)
    limit = pickup_limit(msg.body.get("limit"))
    attachments = messages_batch(mediation=mediation, recipient=recipient, limit=limit)
    if not attachments:
        return Outcome(_status(ctx, mediation, recipient, recipient_did))
    body = {"recipient_did": recipient_did} if recipient_did is not None else {}
    ctx.extra["delivered"] = len(attachments)
    return Outcome({"type": PICKUP + "delivery", "body": body, "attachments": attachments})


def received(ctx, msg: PlainMessage) -> Outcome:
    mediation = _granted(ctx)
    pickup_received(ctx, mediation, msg.body.get("message_id_list"))
    return Outcome(_status(ctx, mediation, None, None))


def live_delivery_change(ctx, msg: PlainMessage) -> Outcome:
    mediation = _granted(ctx)
    value = pickup_live(ctx, msg.body.get("live_delivery"))
    return Outcome(_status(ctx, mediation, None, None, live=value), live=value)


# --- message-pickup/4.0, DIDComm v2 format (the v1 format: handlers_v1.py) ----------------------


def pickup4_routed(return_route: str | None) -> None:
    """Pickup 4.0, both formats: a request (status, delivery, live-delivery-change) must ask for
    its answer on this connection (`return_route: "all"`; "thread" is taken alike), or it could
    not be answered at all (the spec requires it: docs/didcomm.md)."""
    if return_route not in ("all", "thread"):
        raise Problem(Code.RETURN_ROUTE_REQUIRED, 'Message Pickup 4.0 requests need return_route "all"')


def status4_fields(figures: Figures, *, recipient_did: str | None, live: bool) -> dict:
    """A Pickup 4.0 `status`'s fields, both formats: the times in UTC epoch milliseconds (only when
    something waits), the stored bytes, whether live delivery is on."""
    fields: dict = {} if recipient_did is None else {"recipient_did": recipient_did}
    fields["message_count"] = figures.count
    if figures.newest is not None and figures.oldest is not None:
        fields["newest_received_time"] = epoch_ms(figures.newest)
        fields["oldest_received_time"] = epoch_ms(figures.oldest)
    fields["total_bytes"] = figures.total_bytes
    fields["live_delivery"] = live
    return fields


def _status4(ctx, mediation, recipient, recipient_did, *, live: bool | None = None) -> dict:
    figures = messages_figures(mediation=mediation, recipient=recipient)
    body = status4_fields(figures, recipient_did=recipient_did, live=bool(ctx.live) if live is None else live)
    return {"type": PICKUP4 + "status", "body": body}


def status_request4(ctx, msg: PlainMessage) -> Outcome:
    mediation, recipient, recipient_did = _pickup_scope(ctx, msg)
    pickup4_routed(msg.return_route)
    return Outcome(_status4(ctx, mediation, recipient, recipient_did))


def delivery_request4(ctx, msg: PlainMessage) -> Outcome:
    """Up to `message_count_limit` queued messages; an empty `delivery` at once when none waits."""
    mediation, recipient, recipient_did = _pickup_scope(ctx, msg)
    pickup4_routed(msg.return_route)
    limit = pickup_limit(msg.body.get("message_count_limit"), "message_count_limit")
    attachments = messages_batch(mediation=mediation, recipient=recipient, limit=limit)
    body = {"recipient_did": recipient_did} if recipient_did is not None else {}
    ctx.extra["delivered"] = len(attachments)
    return Outcome({"type": PICKUP4 + "delivery", "body": body, "attachments": attachments})


def received4(ctx, msg: PlainMessage) -> Outcome:
    """Fire and forget: the listed messages leave the queue, nothing is answered."""
    pickup_received(ctx, _granted(ctx), msg.body.get("message_id_list"))
    return Outcome()


def live_delivery_change4(ctx, msg: PlainMessage) -> Outcome:
    mediation = _granted(ctx)
    pickup4_routed(msg.return_route)
    value = pickup_live(ctx, msg.body.get("live_delivery"))
    return Outcome(_status4(ctx, mediation, None, None, live=value), live=value, pickup=PICKUP4)


# --- push-notifications-fcm/1.0 and -apns/1.0 (docs/push.md, "Registration") ---------------------


def set_device_info(ctx, msg: PlainMessage) -> Outcome:
    """RFC 0734 / 0699 in a v2 message on a granted mediation; not answered (docs/push.md)."""
    ctx.extra["device"] = devices.info_set(ctx.tenant, _granted(ctx), devices.kind_of(msg.type), msg.body.get)
    return Outcome()


def get_device_info(ctx, msg: PlainMessage) -> Outcome:
    kind = devices.kind_of(msg.type)
    return Outcome({"type": kind.base + "device-info", "body": devices.info_get(ctx.tenant, _granted(ctx), kind)})


# --- trust-ping, discover-features, report-problem ----------------------------------------------


def ping(ctx, msg: PlainMessage) -> Outcome:
    _require_caller(ctx)
    if msg.body.get("response_requested", True) is False:
        return Outcome()
    return Outcome({"type": TRUST_PING + "ping-response", "body": {}})


def queries(ctx, msg: PlainMessage) -> Outcome:
    _require_caller(ctx)
    asked = msg.body.get("queries")
    if not isinstance(asked, list) or not all(isinstance(q, dict) for q in asked):
        raise Problem(Code.BAD_BODY, "queries must be a list of objects")
    disclosures: list[dict[str, object]] = []
    for query in asked:
        if query.get("feature-type") != "protocol" or not isinstance(query.get("match"), str):
            continue
        pattern = query["match"]
        for piuri, roles in protocols.SUPPORTED.items():
            if matches(pattern, piuri) and not any(d["id"] == piuri for d in disclosures):
                disclosures.append({"feature-type": "protocol", "id": piuri, "roles": list(roles)})
    return Outcome({"type": DISCOVER + "disclose", "body": {"disclosures": disclosures}})


def matches(pattern: str, piuri: str) -> bool:
    """Discover Features (1.0 and 2.0) match: exact, or a trailing `*` wildcard."""
    return piuri.startswith(pattern[:-1]) if pattern.endswith("*") else pattern == piuri


def problem_report(ctx, msg: PlainMessage) -> Outcome:
    note_reported(ctx, msg.body.get("code"))
    return Outcome()


def note_reported(ctx, code: object) -> None:
    """A client's problem report, v1 and v2: its code on the log line when it is a short ASCII string."""
    ctx.extra["reported"] = code if isinstance(code, str) and len(code) <= 64 and code.isascii() else "-"


HANDLERS: dict[str, Callable[..., Outcome]] = {
    FORWARD: forward,
    CM2 + "mediate-request": mediate_request,
    CM3 + "mediate-request": mediate_request,
    CM2 + "keylist-update": recipient_update,
    CM3 + "recipient-update": recipient_update,
    CM2 + "keylist-query": recipient_query,
    CM3 + "recipient-query": recipient_query,
    PICKUP + "status-request": status_request,
    PICKUP + "delivery-request": delivery_request,
    PICKUP + "messages-received": received,
    PICKUP + "live-delivery-change": live_delivery_change,
    PICKUP4 + "status-request": status_request4,
    PICKUP4 + "delivery-request": delivery_request4,
    PICKUP4 + "messages-received": received4,
    PICKUP4 + "live-delivery-change": live_delivery_change4,
    PICKUP4 + "problem-report": problem_report,
    TRUST_PING + "ping": ping,
    DISCOVER + "queries": queries,
    REPORT_PROBLEM + "problem-report": problem_report,
    PUSH_FCM + "set-device-info": set_device_info,
    PUSH_FCM + "get-device-info": get_device_info,
    PUSH_APNS + "set-device-info": set_device_info,
    PUSH_APNS + "get-device-info": get_device_info,
}
