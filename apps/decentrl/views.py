"""HTTP endpoints of DCTRL-0004 §3 under Django's handler: the DID document, /health, /public.
POST / is the production entry's (mediator_project/entry.py)."""

from __future__ import annotations

import hashlib
import logging
import re

from django.core.exceptions import TooManyFieldsSent
from django.db import DatabaseError, connection
from django.http import HttpRequest, HttpResponse, JsonResponse

from apps.messaging.public import public_events_list
from apps.ops.http import allow_methods
from apps.realtime.health import channel_layer_reachable
from apps.tenants.middleware import TenantRequest
from apps.wire.canonical import canonical_str
from apps.wire.envelope import Pagination, parse_pagination
from apps.wire.errors import ErrorCode, ProtocolError, error_body

from .dispatch import http_unavailable

log = logging.getLogger("mediator.command")


def protocol_json(body: dict, status: int = 200, retry_after: int | None = None) -> HttpResponse:
    response = HttpResponse(canonical_str(body), status=status, content_type="application/json")
    if retry_after is not None:
        response["Retry-After"] = str(retry_after)
    return response


def _error(code: ErrorCode) -> HttpResponse:
    return protocol_json(error_body(code), code.http_status)


def _wrong_method() -> HttpResponse:
    return protocol_json(error_body(ErrorCode.INVALID_COMMAND), 405)


READ_ONLY = ("GET", "HEAD")


@allow_methods(("GET", "HEAD", "POST"), _wrong_method)
def root(request: TenantRequest) -> HttpResponse:
    """GET / → DID document. POST / is the production entry's (mediator_project/entry.py), which
    answers it before Django: one reaching this view means the server runs Django's own handler
    instead of mediator_project.wsgi's application, and is refused as unavailable, logged."""
    if request.method == "POST":
        log.error("POST / reached Django's handler: serve mediator_project.wsgi.application")
        status, headers, body = http_unavailable()
        return HttpResponse(body, status=status, headers=dict(headers))
    return did_document(request)


@allow_methods(READ_ONLY, _wrong_method)
def did_document(request: TenantRequest) -> HttpResponse:
    """The tenant's DID document exactly as DCTRL-0004 §3.2."""
    tenant = request.tenant
    if tenant is None:
        return _error(ErrorCode.UNKNOWN_MEDIATOR)
    if not tenant.is_active:
        return _error(ErrorCode.MEDIATOR_UNAVAILABLE)
    return JsonResponse(tenant.did_document(), json_dumps_params={"separators": (",", ":")})


@allow_methods(READ_ONLY, lambda: JsonResponse({"status": "error", "detail": "method not allowed"}))
def health(request: HttpRequest) -> HttpResponse:
    """200 {"status":"ok"} or 503 {"status":"error","detail":...} (DCTRL-0004 §3.3)."""
    try:
        with connection.cursor() as cur:
            cur.execute("SELECT 1")
    except DatabaseError:
        return JsonResponse({"status": "error", "detail": "database unreachable"}, status=503)
    # Pushes to other processes ride the channel layer: a Redis that is down is a broken node.
    if not channel_layer_reachable():
        return JsonResponse({"status": "error", "detail": "channel layer unreachable"}, status=503)
    tenant = getattr(request, "tenant", None)
    if tenant is not None and not tenant.is_active:
        return JsonResponse({"status": "error", "detail": "mediator suspended"}, status=503)
    return JsonResponse({"status": "ok"})


# --- GET /public/<did> (DCTRL-0007 §6, docs/protocol-readings.md §8) -------------------------------------

_QUERY_INT = re.compile(r"^-?[0-9]{1,16}(\.0*)?$")  # JSON-style integral number; "1.0" counts as 1
PUBLIC_CACHE_CONTROL = "public, max-age=0, must-revalidate"


def _public_query(params) -> tuple[str | None, Pagination]:
    """channel_id, page, page_size from the query string; any bad value is INVALID_COMMAND."""
    pagination: dict = {}
    for name in ("page", "page_size"):
        raw = params.get(name)
        if raw is None:
            continue
        if not _QUERY_INT.match(raw):
            raise ProtocolError(ErrorCode.INVALID_COMMAND, f"{name} must be an integer")
        pagination[name] = int(raw.split(".", 1)[0])
    channel_id = params.get("channel_id")
    if channel_id is not None and not (0 < len(channel_id) <= 256):
        raise ProtocolError(ErrorCode.INVALID_COMMAND, "channel_id must be 1-256 characters")
    return channel_id, parse_pagination({"pagination": pagination})


def _etag_matches(header: str, etag: str) -> bool:
    """If-None-Match uses the weak comparison (RFC 9110 §13.1.2)."""
    if header.strip() == "*":
        return True
    return any(tag.strip().removeprefix("W/") == etag for tag in header.split(","))


@allow_methods(READ_ONLY, _wrong_method)
def public_events(request: TenantRequest, did: str) -> HttpResponse:
    """A publisher's public events, newest first, no authentication; cacheable by ETag."""
    tenant = request.tenant
    if tenant is None:
        return _error(ErrorCode.UNKNOWN_MEDIATOR)
    if not tenant.is_active:
        return _error(ErrorCode.MEDIATOR_UNAVAILABLE)
    try:
        try:
            query = request.GET
        except TooManyFieldsSent as exc:  # Django's 400 would be its HTML page
            raise ProtocolError(ErrorCode.INVALID_COMMAND, "too many query parameters") from exc
        channel_id, page = _public_query(query)
        if "\x00" in (channel_id or ""):
            raise ProtocolError(ErrorCode.INVALID_COMMAND, "NUL in channel_id")
        result = public_events_list(tenant=tenant, did=did, channel_id=channel_id, page=page)
    except ProtocolError as err:
        return protocol_json(err.body(), err.status)
    except DatabaseError:
        return _error(ErrorCode.MEDIATOR_UNAVAILABLE)
    body = canonical_str(
        {"type": "SUCCESS", "payload": {"public_events": result.items, "pagination": page.reply(result.total)}}
    ).encode("utf-8")
    etag = '"' + hashlib.sha256(body).hexdigest()[:40] + '"'
    if_none_match = request.headers.get("If-None-Match")
    if if_none_match and _etag_matches(if_none_match, etag):
        response = HttpResponse(status=304)
    else:
        response = HttpResponse(body, content_type="application/json")
    response["ETag"] = etag
    response["Cache-Control"] = PUBLIC_CACHE_CONTROL
    return response
