"""One handler per command type: read the validated payload, call one service, format the reply."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from apps.messaging import public as public_svc
from apps.messaging import services as svc
from apps.push import services as push_svc
from apps.tenants.models import Tenant
from apps.wire import envelope as env
from apps.wire.envelope import MAX_PAGE_SIZE, Pagination
from apps.wire.errors import ErrorCode, ProtocolError

from .context import CommandContext
from .storage import EventsQuery

SUCCESS = {"type": "SUCCESS"}
Handler = Callable[[CommandContext], dict]


def _fits(tenant: Tenant, page: Pagination) -> bool:
    """Whether the page is within the tenant's page cap (at most the protocol-wide 100)."""
    return page.page_size <= min(tenant.max_page_size or MAX_PAGE_SIZE, MAX_PAGE_SIZE)


def _within_cap(ctx: CommandContext, page: Pagination) -> Pagination:
    """The page, if within the tenant's page cap; else INVALID_COMMAND."""
    if not _fits(ctx.tenant, page):
        raise ProtocolError(ErrorCode.INVALID_COMMAND, "page_size out of range")
    return page


def _page_reply(key: str, page, result: svc.Page) -> dict:
    return {"type": "SUCCESS", "payload": {key: result.items, "pagination": page.reply(result.total)}}


def request_communication_contract(ctx: CommandContext) -> dict:
    body: env.RequestContract = ctx.body
    if ctx.recipient_did == ctx.tenant.did:
        signed = svc.registration_create(
            tenant=ctx.tenant,
            sender_did=ctx.sender_did,
            encrypted=body.encrypted_contract_request,
            ephemeral_public=body.requestor_ephemeral_public_key,
        )
        return {
            "type": "SUCCESS",
            "code": "MEDIATOR_REGISTRATION_SUCCESS",
            "payload": {"signed_communication_contract": signed},
        }
    svc.contract_request_forward(
        tenant=ctx.tenant,
        sender_did=ctx.sender_did,
        recipient_did=ctx.recipient_did,
        encrypted=body.encrypted_contract_request,
        ephemeral_public=body.requestor_ephemeral_public_key,
    )
    return {"type": "SUCCESS", "code": "REQUESTED"}


def communication_contract_response(ctx: CommandContext) -> dict:
    body: env.SignedContract = ctx.body
    svc.contract_response_store(
        tenant=ctx.tenant,
        sender_did=ctx.sender_did,
        recipient_did=ctx.recipient_did,
        signed=body.signed_communication_contract,
    )
    return SUCCESS


def _listing(key: str, query: Callable[..., svc.Page], filters: Callable[[Any], dict] = lambda body: {}) -> Handler:
    """A listing command's handler: the page within the tenant's cap, `query` for the sender's rows
    (with what `filters` takes from the payload), the reply under `key`."""

    def handler(ctx: CommandContext) -> dict:
        page = _within_cap(ctx, ctx.body.page)
        return _page_reply(key, page, query(tenant=ctx.tenant, did=ctx.sender_did, page=page, **filters(ctx.body)))

    return handler


def _acknowledging(acknowledge: Callable[..., object]) -> Handler:
    """An acknowledging command's handler: `acknowledge` the sender's listed ids."""

    def handler(ctx: CommandContext) -> dict:
        body: env.Acknowledge = ctx.body
        acknowledge(tenant=ctx.tenant, did=ctx.sender_did, ids=list(body.ids))
        return SUCCESS

    return handler


def save_communication_contract(ctx: CommandContext) -> dict:
    body: env.SignedContract = ctx.body
    svc.contract_save(tenant=ctx.tenant, owner_did=ctx.sender_did, signed=body.signed_communication_contract)
    return SUCCESS


def save_events(ctx: CommandContext) -> dict:
    body: env.SaveEvents = ctx.body
    svc.events_save(tenant=ctx.tenant, owner_did=ctx.sender_did, events=body.events)
    return SUCCESS


def query_events_read(tenant: Tenant, cmd: env.Command) -> EventsQuery | None:
    """What the storage call reads for QUERY_EVENTS after its claim; None when the page is over the
    cap (the handler refuses it, after the claim's flags, as for every other listing)."""
    body: env.QueryEvents = cmd.body
    if not _fits(tenant, body.page):
        return None
    return EventsQuery(owner_did=cmd.header.sender_did, flt=body.filter, page=body.page)


def query_events(ctx: CommandContext) -> dict:
    body: env.QueryEvents = ctx.body
    page = _within_cap(ctx, body.page)
    return _page_reply("events", page, ctx.read)


def update_event_tags(ctx: CommandContext) -> dict:
    body: env.UpdateEventTags = ctx.body
    svc.event_tags_update(tenant=ctx.tenant, owner_did=ctx.sender_did, updates=body.updates)
    return SUCCESS


def push_device_set(ctx: CommandContext) -> dict:
    """PUSH_DEVICE_SET (our extension, docs/push.md): the sender's device on a service, set or replaced."""
    body: env.PushDeviceSet = ctx.body
    try:
        push_svc.device_set(
            tenant=ctx.tenant,
            subject=push_svc.subject_for_did(ctx.sender_did),
            service=body.service,
            token=body.token,
            platform=body.platform,
        )
    except push_svc.DeviceInvalid as exc:
        raise ProtocolError(ErrorCode.INVALID_COMMAND, exc.code) from None
    return SUCCESS


def push_device_get(ctx: CommandContext) -> dict:
    body: env.PushDevice = ctx.body
    device = push_svc.device_get(
        tenant=ctx.tenant, subject=push_svc.subject_for_did(ctx.sender_did), service=body.service
    )
    shown = None if device is None else {"service": device.service, "token": device.token, "platform": device.platform}
    return {"type": "SUCCESS", "payload": {"device": shown}}


def push_device_remove(ctx: CommandContext) -> dict:
    body: env.PushDevice = ctx.body
    removed = push_svc.device_remove(
        tenant=ctx.tenant, subject=push_svc.subject_for_did(ctx.sender_did), service=body.service
    )
    return {"type": "SUCCESS", "payload": {"removed": removed}}


DIRECT_HANDLERS: dict[str, Handler] = {
    "REQUEST_COMMUNICATION_CONTRACT": request_communication_contract,
    "COMMUNICATION_CONTRACT_RESPONSE": communication_contract_response,
    "QUERY_PENDING_COMMUNICATION_CONTRACT_REQUESTS": _listing(
        "pending_communication_contract_requests", svc.contract_requests_query
    ),
    "ACKNOWLEDGE_PENDING_COMMUNICATION_CONTRACT_REQUESTS": _acknowledging(svc.contract_requests_acknowledge),
    "SAVE_COMMUNICATION_CONTRACT": save_communication_contract,
    "QUERY_COMMUNICATION_CONTRACTS": _listing(
        "communication_contracts", svc.contracts_query, lambda body: {"flt": body.filter}
    ),
    "QUERY_PENDING_EVENTS": _listing(
        "pending_events", svc.pending_events_query, lambda body: {"sender_did": body.filter.sender_did}
    ),
    "ACKNOWLEDGE_PENDING_EVENTS": _acknowledging(svc.pending_events_acknowledge),
    "SAVE_EVENTS": save_events,
    "QUERY_EVENTS": query_events,
    "UPDATE_EVENT_TAGS": update_event_tags,
    "PUSH_DEVICE_SET": push_device_set,
    "PUSH_DEVICE_GET": push_device_get,
    "PUSH_DEVICE_REMOVE": push_device_remove,
}
# Commands whose read the storage call runs after the claim (one statement on PostgreSQL); the
# dispatcher passes what it read to the handler as `ctx.read`.
READS: dict[str, Callable[[Tenant, env.Command], EventsQuery | None]] = {"QUERY_EVENTS": query_events_read}
# DCTRL-0004 §6.2 step 4: these two only check the recipient, not the sender.
RECIPIENT_CHECKED = {"REQUEST_COMMUNICATION_CONTRACT", "COMMUNICATION_CONTRACT_RESPONSE"}


# The publisher rule of DCTRL-0007 (to this mediator, from a registered DID) is checked by
# dispatch before these run, as DCTRL-0004 §6.2 step 4 for every other command.


def publish_public_event(ctx: CommandContext) -> dict:
    event = public_svc.public_event_publish(
        tenant=ctx.tenant, publisher_did=ctx.sender_did, public_event=ctx.body.public_event
    )
    return {"type": "SUCCESS", "payload": {"public_event_id": str(event.public_id)}}


def delete_public_event(ctx: CommandContext) -> dict:
    public_svc.public_event_delete(
        tenant=ctx.tenant, publisher_did=ctx.sender_did, public_event_id=ctx.body.public_event_id
    )
    return SUCCESS


# ONE_WAY_PUBLIC handlers (DCTRL-0007, docs/protocol-readings.md §8).
PUBLIC_HANDLERS: dict[str, Handler] = {
    "PUBLISH_PUBLIC_EVENT": publish_public_event,
    "DELETE_PUBLIC_EVENT": delete_public_event,
}
