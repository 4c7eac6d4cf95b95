"""DIDComm v1 protocol handlers: one function per message type, (ContextV1, V1Message) -> Outcome.

DID Exchange 1.0/1.1 (responder), Coordinate Mediation 1.0, Pickup 2.0 and 1.0, Trust Ping 1.0,
Discover Features 1.0, Report Problem 1.0, push-notifications-fcm/apns 1.0 (their rules in
devices.py, shared with v2); the Routing 1.0 forward is forward.py's (`forward_v1`, with v2's
forward and their one store). Bodies are validated here into the same problem codes as v2; the writes are services (the grant/recipient/queue store is shared).
"""

from __future__ import annotations

import json
import uuid
from collections.abc import Callable
from datetime import UTC, datetime
from typing import TYPE_CHECKING

from apps.didcomm.core import diddoc, message_v1
from apps.didcomm.core.did_key import key_from_did_key
from apps.didcomm.core.errors import DidcommError, InvalidSignature
from apps.didcomm.core.keys import ED25519, PublicKey
from apps.didcomm.core.message_v1 import V1Message
from apps.didcomm.core.resolver import resolve_did
from apps.wire.canonical import loads_strict
from apps.wire.encoding import EncodingError, b58decode, b58encode

from . import devices, metrics, protocols
from .forward import forward_v1
from .handlers import (
    Outcome,
    _paginate,
    matches,
    note_reported,
    pickup4_routed,
    pickup_limit,
    pickup_live,
    pickup_received,
    pickup_recipient,
    recipients_update,
    status4_fields,
    update_list,
)
from .identity import did_key_of, v1_did
from .invitation import invitation_id
from .mediation import (
    ConnectionConflict,
    connection_accept,
    connection_complete,
    mediation_of,
    mediation_request_v1,
    recipients_page,
)
from .models import Connection, Mediation
from .problems import Problem
from .protocols import (
    CM1,
    DIDX_10,
    DIDX_11,
    DISCOVER_V1,
    FORWARD_V1,
    NOTIFICATION_PROBLEM,
    PICKUP4,
    PICKUP_V1,
    PICKUP_V2,
    PUSH_APNS,
    PUSH_FCM,
    REPORT_PROBLEM_V1,
    SUPPORTED_V1,
    TRUST_PING_V1,
    Code,
)
from .queue import messages_figures, messages_received, messages_rows, messages_status
from .recipients import key_forms

if TYPE_CHECKING:  # the context is the v1 door's, which calls these handlers
    from .v1 import ContextV1

RETURN_ROUTE = {"return_route": "all"}  # what a Credo mediator puts on its pickup answers


def _thread(msg: V1Message, **extra) -> dict:
    return {"thid": msg.thid, **extra}


def _answer(type_: str, msg: V1Message, fields: dict | None = None) -> Outcome:
    """An answer on `msg`'s thread: a new @id, the fields, `~thread`."""
    return Outcome({"@type": type_, "@id": str(uuid.uuid4()), **(fields or {}), "~thread": _thread(msg)})


def iso(at: datetime) -> str:
    """`2026-11-23T10:00:00.123Z` (what Credo sends and parses)."""
    return at.isoformat(timespec="milliseconds").replace("+00:00", "Z")


def _connection(ctx: ContextV1) -> Connection:
    if ctx.sender_verkey is None:
        raise Problem(Code.UNAUTHENTICATED, "this message must be authcrypt", 401)
    if ctx.connection is None:
        raise Problem(Code.NOT_CONNECTED, "no connection with this key: do DID Exchange first", 403)
    return ctx.connection


def _granted(ctx: ContextV1) -> Mediation:
    mediation = mediation_of(connection=_connection(ctx))
    if mediation is None:
        raise Problem(Code.NOT_GRANTED, "no mediation granted to this connection", 403)
    return mediation


# --- DID Exchange 1.0 / 1.1 (responder) ---------------------------------------------------------


def _their_keys(doc) -> set[str]:
    """Every Ed25519 key of a DID document, as base58 verkeys (methods and did:key recipientKeys)."""
    keys = {b58encode(vm.key.raw) for vm in doc.verification_methods if vm.key.crv == ED25519}
    for svc in doc.services:
        for ref in svc.get("recipientKeys", []) if isinstance(svc.get("recipientKeys"), list) else []:
            if isinstance(ref, str) and ref.startswith("did:key:"):
                try:
                    key = key_from_did_key(ref)
                except DidcommError:
                    continue
                if key.crv == ED25519:
                    keys.add(b58encode(key.raw))
            elif isinstance(ref, str) and not ref.startswith(("did:", "#")):  # a legacy base58 verkey
                try:
                    keys.add(message_v1.key_to_verkey(ref))
                except DidcommError:
                    continue
    return keys


def _unqualified(did: str) -> bool:
    """An unqualified (Indy-style) DID: base58 of 16 bytes (or a full 32-byte verkey), as ACA-Py's
    DID Exchange 1.0 and older agents send beside `did_doc~attach` (RFC 0023)."""
    if not 16 <= len(did) <= 44:
        return False
    try:
        return len(b58decode(did)) in (16, 32)
    except EncodingError:
        return False


def _attached_document(did: str, attached: object, sender_verkey: str):
    """RFC 0023 `did_doc~attach`: a DID document signed (JWS) by the requester's own key; its id is
    `did` (or `did:sov:<did>` for an unqualified did, as ACA-Py writes it)."""
    if not isinstance(attached, dict):
        raise Problem(Code.BAD_BODY, "did_doc~attach must be a signed attachment")
    try:
        content, signer = message_v1.verify_attachment(attached)
    except InvalidSignature as exc:
        raise Problem(Code.SENDER_MISMATCH, "did_doc~attach's signature does not verify") from exc
    except DidcommError as exc:
        raise Problem(Code.BAD_BODY, "did_doc~attach must carry data.base64 and a data.jws signature") from exc
    if b58encode(signer.raw) != sender_verkey:
        raise Problem(Code.SENDER_MISMATCH, "did_doc~attach must be signed by the envelope's sender key")
    try:
        doc = diddoc.legacy_document_from_json(loads_strict(content))
    except (ValueError, DidcommError) as exc:
        raise Problem(Code.BAD_BODY, "did_doc~attach is not a DID document") from exc
    if doc.id not in (did, "did:sov:" + did):
        raise Problem(Code.BAD_BODY, "the attached DID document's id is not did")
    return doc


def _their_endpoint(doc) -> tuple[str, list[str]]:
    """(first http(s) DIDComm endpoint or "", its routing keys as base58) of their DID document."""
    for endpoint in doc.didcomm_endpoints():
        if endpoint.uri.startswith(("http://", "https://")):
            try:
                routing = [message_v1.key_to_verkey(k) for k in endpoint.routing_keys]
            except DidcommError as exc:
                raise Problem(Code.BAD_BODY, "routingKeys must be Ed25519 did:keys or verkeys") from exc
            return endpoint.uri, routing
    return "", []


def didx_request(ctx: ContextV1, msg: V1Message) -> Outcome:
    """RFC 0023: answer a request to our invitation with a response naming our did:peer:4."""
    version = DIDX_11 if msg.type.startswith(DIDX_11) else DIDX_10
    if ctx.sender_verkey is None:
        raise Problem(Code.UNAUTHENTICATED, "a DID Exchange request must be authcrypt", 401)
    by_invitation = {invitation_id(i): i for i in ctx.identities}
    if msg.pthid not in by_invitation:
        raise Problem(Code.BAD_BODY, "~thread.pthid must be this mediator's invitation @id")
    did = msg.get("did")
    attached = msg.get("did_doc~attach")
    if not isinstance(did, str) or not (did.startswith("did:") or _unqualified(did)):
        raise Problem(Code.BAD_BODY, "did must be a DID or an unqualified base58 DID")
    if attached is not None:
        doc = _attached_document(did, attached, ctx.sender_verkey)
    elif not did.startswith("did:"):
        raise Problem(Code.UNSUPPORTED_DID, "an unqualified did needs its did_doc~attach")
    else:
        try:
            doc = resolve_did(did)
        except DidcommError as exc:
            raise Problem(
                Code.UNSUPPORTED_DID,
                "did does not resolve (did:peer:2, did:peer:4 long form, did:key) and has no did_doc~attach",
            ) from exc
    if ctx.sender_verkey not in _their_keys(doc):
        raise Problem(Code.SENDER_MISMATCH, "the envelope's sender key is not a key of did")
    endpoint, routing_keys = _their_endpoint(doc)
    try:
        connection = connection_accept(
            tenant=ctx.tenant,
            identity=ctx.identity,
            their_did=did,
            their_verkey=ctx.sender_verkey,
            endpoint=endpoint,
            routing_keys=routing_keys,
            thread_id=msg.thid,
            protocol=protocols.short_type(version + "request").rsplit("/", 1)[0],
        )
    except ConnectionConflict:
        raise Problem(Code.CONNECTION_EXISTS, "this key already has a connection on another thread") from None
    invitation_key = by_invitation[msg.pthid].authentication_key
    our_did = v1_did(ctx.identity)
    response = {
        "@type": version + "response",
        "@id": str(uuid.uuid4()),
        "~thread": _thread(msg, pthid=msg.pthid),
        "did": our_did,
    }
    if version == DIDX_11:
        # RFC 0023 1.1: the DID, signed by the invitation key (what ACA-Py and Credo verify).
        response["did_rotate~attach"] = message_v1.signed_text_attachment(str(uuid.uuid4()), our_did, invitation_key)
    else:
        doc_json = json.dumps(resolve_did(our_did).json, separators=(",", ":"))
        attach = message_v1.signed_text_attachment(str(uuid.uuid4()), doc_json, invitation_key)
        attach["mime-type"] = "application/json"
        response["did_doc~attach"] = attach
    ctx.extra["connection"] = connection.pk
    return Outcome(response, connection=connection)


def didx_complete(ctx: ContextV1, msg: V1Message) -> Outcome:
    connection = _connection(ctx)
    if msg.thid != connection.thread_id:
        raise Problem(Code.BAD_BODY, "complete must be on the request's thread")
    connection_complete(connection=connection)
    return Outcome()


# --- Coordinate Mediation 1.0 (seed 003) --------------------------------------------------------


def mediate_request(ctx: ContextV1, msg: V1Message) -> Outcome:
    """Accepted once our DID Exchange response is sent (ACA-Py asks before it sends complete)."""
    mediation = mediation_request_v1(connection=_connection(ctx))
    if mediation.state != Mediation.State.GRANTED:
        return _answer(CM1 + "mediate-deny", msg)
    return _answer(
        CM1 + "mediate-grant", msg, {"endpoint": ctx.identity.http_uri, "routing_keys": [did_key_of(ctx.identity)]}
    )


def keylist_update(ctx: ContextV1, msg: V1Message) -> Outcome:
    """Keys as did:key or base58, stored as did:key; each result echoes `recipient_key` verbatim."""
    mediation = _granted(ctx)
    updates = update_list(msg.get("updates"))
    normalised = []
    for update in updates:
        try:
            did = message_v1.key_to_did_key(update.get("recipient_key"))
        except DidcommError:
            did = None  # not a key: the shared rule answers client_error
        normalised.append({"recipient_did": did, "action": update.get("action")})
    assert ctx.sender_verkey is not None  # _granted required an authcrypt sender
    proof = key_forms([PublicKey(ED25519, b58decode(ctx.sender_verkey))])  # the authcrypt sender's key
    results = recipients_update(mediation, normalised, proof=proof)
    updated = [
        {"recipient_key": u.get("recipient_key"), "action": u.get("action"), "result": r.result}
        for u, r in zip(updates, results, strict=True)
    ]
    return _answer(CM1 + "keylist-update-response", msg, {"updated": updated})


def keylist_query(ctx: ContextV1, msg: V1Message) -> Outcome:
    """`keylist` without RFC 0211's optional `pagination` block: ACA-Py 1.7 rejects it (docs/didcomm.md)."""
    mediation = _granted(ctx)
    limit, offset = _paginate({"paginate": msg.get("paginate")} if msg.get("paginate") is not None else {})
    keys, _ = recipients_page(mediation=mediation, limit=limit, offset=offset)
    return _answer(CM1 + "keylist", msg, {"keys": [{"recipient_key": k} for k in keys]})


# --- Pickup 2.0 (Credo) and 1.0 -----------------------------------------------------------------


def _pickup_scope(ctx: ContextV1, msg: V1Message):
    mediation = _granted(ctx)
    key = msg.get("recipient_key")
    if key is None:
        return mediation, None, None
    try:
        did = message_v1.key_to_did_key(key)
    except DidcommError:
        raise Problem(Code.BAD_BODY, "recipient_key must be a did:key or base58 verkey") from None
    return mediation, pickup_recipient(mediation, did, "recipient_key is not one of this connection's keys"), key


def _status(ctx, msg, mediation, recipient, key, *, live: bool | None = None) -> dict:
    figures = messages_status(mediation=mediation, recipient=recipient)
    status: dict = {"@type": PICKUP_V2 + "status", "@id": str(uuid.uuid4())}
    if key is not None:
        status["recipient_key"] = key
    status["message_count"] = figures["message_count"]
    if figures["message_count"]:
        status["newest_received_time"] = iso(datetime.fromtimestamp(figures["newest_received_time"], UTC))
        status["oldest_received_time"] = iso(datetime.fromtimestamp(figures["oldest_received_time"], UTC))
        status["total_bytes"] = figures["total_bytes"]
    if live is not None:
        status["live_delivery"] = live
    elif ctx.live is not None:
        status["live_delivery"] = bool(ctx.live)
    status["~thread"] = _thread(msg)
    status["~transport"] = dict(RETURN_ROUTE)
    return status


def status_request(ctx: ContextV1, msg: V1Message) -> Outcome:
    mediation, recipient, key = _pickup_scope(ctx, msg)
    return Outcome(_status(ctx, msg, mediation, recipient, key))


def attachments_v1(rows) -> list[dict]:
    """Pickup 2.0 `~attach` entries of queued rows: `data.json` (what a Credo mediator sends)."""
    return [{"@id": mid, "lastmod_time": iso(at), "data": data} for mid, data, at in rows]


def delivery_request(ctx: ContextV1, msg: V1Message) -> Outcome:
    mediation, recipient, key = _pickup_scope(ctx, msg)
    rows = messages_rows(mediation=mediation, recipient=recipient, limit=pickup_limit(msg.get("limit")))
    if not rows:  # RFC 0685: nothing to send is answered with a status, at once
        return Outcome(_status(ctx, msg, mediation, recipient, key))
    ctx.extra["delivered"] = len(rows)
    delivery: dict[str, object] = {"@type": PICKUP_V2 + "delivery", "@id": str(uuid.uuid4())}
    if key is not None:
        delivery["recipient_key"] = key
    delivery.update({"~attach": attachments_v1(rows), "~thread": _thread(msg), "~transport": dict(RETURN_ROUTE)})
    return Outcome(delivery)


def received(ctx: ContextV1, msg: V1Message) -> Outcome:
    mediation = _granted(ctx)
    pickup_received(ctx, mediation, msg.get("message_id_list"))
    return Outcome(_status(ctx, msg, mediation, None, None))


def live_delivery_change(ctx: ContextV1, msg: V1Message) -> Outcome:
    mediation = _granted(ctx)
    value = pickup_live(ctx, msg.get("live_delivery"))
    return Outcome(_status(ctx, msg, mediation, None, None, live=value), live=value)


def batch_pickup(ctx: ContextV1, msg: V1Message) -> Outcome:
    """Pickup 1.0: a batch has no acknowledgement, so what it carries leaves the queue with it."""
    mediation = _granted(ctx)
    rows = messages_rows(mediation=mediation, recipient=None, limit=pickup_limit(msg.get("batch_size"), "batch_size"))
    removed = messages_received(mediation=mediation, ids=[mid for mid, _, _ in rows])
    metrics.DELIVERED.inc(removed)
    ctx.extra["delivered"] = removed
    # RFC 0212 names the entry's id `@id`; Credo (its own mediator too) reads `id` and refuses a
    # batch without it: both, with the same value.
    batch = [{"@id": mid, "id": mid, "message": data.get("json")} for mid, data, _ in rows]
    return _answer(PICKUP_V1 + "batch", msg, {"messages~attach": batch})


def status_request_v1(ctx: ContextV1, msg: V1Message) -> Outcome:
    mediation = _granted(ctx)
    figures = messages_status(mediation=mediation, recipient=None)
    return _answer(PICKUP_V1 + "status", msg, {"message_count": figures["message_count"]})


# --- Message Pickup 4.0, DIDComm v1 format (the rules: handlers.py's Pickup 4.0) ---------------


def _pickup4_scope(ctx: ContextV1, msg: V1Message):
    """(grant, recipient or None, the recipient_did as given): over DIDComm v1 a `recipient_did`
    MUST be a did:key (the spec), with or without a fragment."""
    mediation = _granted(ctx)
    did = msg.get("recipient_did")
    if did is None:
        return mediation, None, None
    if not isinstance(did, str) or not did.startswith("did:key:"):
        raise Problem(Code.BAD_BODY, "recipient_did must be a did:key over DIDComm v1")
    try:
        key = message_v1.key_to_did_key(did)
    except DidcommError:
        raise Problem(Code.BAD_BODY, "recipient_did must be an Ed25519 did:key") from None
    return mediation, pickup_recipient(mediation, key, "recipient_did is not one of this connection's keys"), did


def _status4(ctx: ContextV1, msg: V1Message, mediation, recipient, did, *, live: bool | None = None) -> Outcome:
    figures = messages_figures(mediation=mediation, recipient=recipient)
    fields = status4_fields(figures, recipient_did=did, live=bool(ctx.live) if live is None else live)
    return _answer(PICKUP4 + "status", msg, fields)


def status_request4(ctx: ContextV1, msg: V1Message) -> Outcome:
    mediation, recipient, did = _pickup4_scope(ctx, msg)
    pickup4_routed(msg.return_route)
    return _status4(ctx, msg, mediation, recipient, did)


def delivery_request4(ctx: ContextV1, msg: V1Message) -> Outcome:
    """Up to `message_count_limit` queued messages as `~attach`; an empty one at once when none waits."""
    mediation, recipient, did = _pickup4_scope(ctx, msg)
    pickup4_routed(msg.return_route)
    limit = pickup_limit(msg.get("message_count_limit"), "message_count_limit")
    rows = messages_rows(mediation=mediation, recipient=recipient, limit=limit)
    ctx.extra["delivered"] = len(rows)
    fields: dict = {} if did is None else {"recipient_did": did}
    return _answer(PICKUP4 + "delivery", msg, {**fields, "~attach": attachments_v1(rows)})


def received4(ctx: ContextV1, msg: V1Message) -> Outcome:
    """Fire and forget: the listed messages leave the queue, nothing is answered."""
    pickup_received(ctx, _granted(ctx), msg.get("message_id_list"))
    return Outcome()


def live_delivery_change4(ctx: ContextV1, msg: V1Message) -> Outcome:
    mediation = _granted(ctx)
    pickup4_routed(msg.return_route)
    value = pickup_live(ctx, msg.get("live_delivery"))
    status = _status4(ctx, msg, mediation, None, None, live=value).response
    return Outcome(status, live=value, pickup=PICKUP4)


# --- push-notifications-fcm/1.0 and -apns/1.0 (docs/push.md, "Registration") ---------------------


def set_device_info(ctx: ContextV1, msg: V1Message) -> Outcome:
    """RFC 0734 / 0699 on a connection with a granted mediation; not answered (docs/push.md)."""
    ctx.extra["device"] = devices.info_set(ctx.tenant, _granted(ctx), devices.kind_of(msg.type), msg.get)
    return Outcome()


def get_device_info(ctx: ContextV1, msg: V1Message) -> Outcome:
    kind = devices.kind_of(msg.type)
    return _answer(kind.base + "device-info", msg, devices.info_get(ctx.tenant, _granted(ctx), kind))


# --- Trust Ping 1.0, Discover Features 1.0, Report Problem 1.0 ----------------------------------


def ping(ctx: ContextV1, msg: V1Message) -> Outcome:
    _connection(ctx)
    if msg.get("response_requested", True) is False:
        return Outcome()
    return _answer(TRUST_PING_V1 + "ping_response", msg)


def query(ctx: ContextV1, msg: V1Message) -> Outcome:
    _connection(ctx)
    pattern = msg.get("query")
    if not isinstance(pattern, str) or not pattern:
        raise Problem(Code.BAD_BODY, "query must be a string")
    protocols = [{"pid": pid, "roles": list(roles)} for pid, roles in SUPPORTED_V1.items() if matches(pattern, pid)]
    return _answer(DISCOVER_V1 + "disclose", msg, {"protocols": protocols})


def problem_report(ctx: ContextV1, msg: V1Message) -> Outcome:
    description = msg.get("description")
    note_reported(ctx, description.get("code") if isinstance(description, dict) else msg.get("problem-code"))
    return Outcome()


HANDLERS: dict[str, Callable[..., Outcome]] = {
    DIDX_11 + "request": didx_request,
    DIDX_10 + "request": didx_request,
    DIDX_11 + "complete": didx_complete,
    DIDX_10 + "complete": didx_complete,
    DIDX_11 + "problem_report": problem_report,
    DIDX_10 + "problem_report": problem_report,
    CM1 + "mediate-request": mediate_request,
    CM1 + "keylist-update": keylist_update,
    CM1 + "keylist-query": keylist_query,
    FORWARD_V1: forward_v1,
    PICKUP_V2 + "status-request": status_request,
    PICKUP_V2 + "delivery-request": delivery_request,
    PICKUP_V2 + "messages-received": received,
    PICKUP_V2 + "live-delivery-change": live_delivery_change,
    PICKUP4 + "status-request": status_request4,
    PICKUP4 + "delivery-request": delivery_request4,
    PICKUP4 + "messages-received": received4,
    PICKUP4 + "live-delivery-change": live_delivery_change4,
    PICKUP4 + "problem-report": problem_report,
    PICKUP_V1 + "batch-pickup": batch_pickup,
    PICKUP_V1 + "status-request": status_request_v1,
    TRUST_PING_V1 + "ping": ping,
    DISCOVER_V1 + "query": query,
    REPORT_PROBLEM_V1: problem_report,
    NOTIFICATION_PROBLEM: problem_report,
    PUSH_FCM + "set-device-info": set_device_info,
    PUSH_FCM + "get-device-info": get_device_info,
    PUSH_FCM + "problem-report": problem_report,
    PUSH_APNS + "set-device-info": set_device_info,
    PUSH_APNS + "get-device-info": get_device_info,
    PUSH_APNS + "problem-report": problem_report,
}
