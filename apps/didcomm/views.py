"""DIDComm over HTTP: `POST /didcomm` (a v2 JWE or a v1 RFC 0019 envelope, told apart by shape) and
`GET /didcomm/invitation` (OOB 2.0, or OOB 1.1 with `?version=1`).

POST is the production entry's (mediator_project/entry.py, with dispatch.http_reply), which answers
it before Django.
"""

from __future__ import annotations

import json
import logging

from django.core.exceptions import TooManyFieldsSent
from django.db import DatabaseError
from django.http import HttpResponse, JsonResponse

from apps.ops.http import allow_methods
from apps.tenants.middleware import TenantRequest

from . import dispatch
from .invitation import invitation_for, invitation_v1_for
from .policy import policy_for
from .problems import problem_message
from .protocols import Code

log = logging.getLogger("mediator.didcomm")


def _problem(code: str, comment: str, status: int) -> HttpResponse:
    return JsonResponse(problem_message(code, comment, pthid=None), status=status)


def _wrong_method() -> HttpResponse:
    return _problem(Code.MALFORMED, "method not allowed", 405)


@allow_methods(("GET", "HEAD", "POST"), _wrong_method)
def endpoint(request: TenantRequest) -> HttpResponse:
    """GET: the invitation (what an `?_oob=` URL opens). A POST reaching this view means the server
    runs Django's own handler instead of mediator_project.wsgi's application: refused as
    unavailable, logged."""
    if request.method == "POST":
        log.error("POST /didcomm reached Django's handler: serve mediator_project.wsgi.application")
        status, headers, body = dispatch.http_unavailable()
        return HttpResponse(body, status=status, headers=dict(headers))
    return invitation(request)


@allow_methods(("GET", "HEAD"), _wrong_method)
def invitation(request: TenantRequest) -> HttpResponse:
    """The tenant's OOB 2.0 invitation as JSON; `?form=url` gives the `?_oob=` URL as text.
    `?did=legacy`: the same invitation from the mediator's legacy DID, for older did:peer:2 libraries.
    `?version=1`: the Out-of-Band 1.1 invitation for DIDComm v1 agents (its URL form uses `?oob=`)."""
    tenant = request.tenant
    if tenant is None:
        return _problem(Code.UNKNOWN_MEDIATOR, "no mediator at this host", 404)
    if not tenant.is_active:
        return _problem(Code.UNAVAILABLE, "mediator suspended", 503)
    try:
        query = request.GET
    except TooManyFieldsSent:  # Django's 400 would be its HTML page
        return _problem(Code.MALFORMED, "too many query parameters", 400)
    if query.get("did", "legacy") != "legacy":
        return _problem(Code.MALFORMED, "did must be `legacy` or absent", 400)
    try:
        if not policy_for(tenant=tenant).enabled:
            return _problem(Code.UNKNOWN_MEDIATOR, "DIDComm is not enabled on this mediator", 404)
        v1 = query.get("version") == "1" or "oob" in query
        if v1:
            message, url = invitation_v1_for(tenant=tenant)
        else:
            message, url = invitation_for(tenant=tenant, legacy=query.get("did") == "legacy")
    except DatabaseError:
        return _problem(Code.UNAVAILABLE, "mediator unavailable", 503)
    if query.get("form") == "url":
        return HttpResponse(url, content_type="text/plain; charset=utf-8")
    return HttpResponse(json.dumps(message, separators=(",", ":")), content_type="application/json")
