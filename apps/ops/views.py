"""GET /metrics: Prometheus exposition, for a bearer token or internal addresses only."""

from __future__ import annotations

import hmac
import ipaddress

from django.conf import settings
from django.http import HttpRequest, HttpResponse
from django.views.decorators.http import require_http_methods
from prometheus_client import CONTENT_TYPE_LATEST

from .metrics import exposition


def _internal(addr: str) -> bool:
    try:
        ip = ipaddress.ip_address(addr.strip())
    except ValueError:
        return False
    return ip.is_loopback or ip.is_private


def metrics_allowed(request: HttpRequest) -> bool:
    """A matching `Authorization: Bearer <MEDIATOR_METRICS_TOKEN>`, or (if allowed) a request that
    comes from an internal address and was not forwarded for an outside one by a proxy."""
    token = settings.MEDIATOR_METRICS_TOKEN
    auth = request.headers.get("Authorization", "")
    if auth:
        scheme, _, presented = auth.partition(" ")
        # A presented token must be right: a wrong one is refused even from inside.
        return bool(token) and scheme.lower() == "bearer" and hmac.compare_digest(presented.strip(), token)
    if not settings.MEDIATOR_METRICS_ALLOW_INTERNAL:
        return False
    chain = [request.META.get("REMOTE_ADDR") or ""]
    forwarded = request.headers.get("X-Forwarded-For")
    if forwarded:
        chain += forwarded.split(",")
    return all(_internal(a) for a in chain)


@require_http_methods(["GET"])
def metrics(request: HttpRequest) -> HttpResponse:
    if not metrics_allowed(request):
        return HttpResponse("forbidden\n", status=403, content_type="text/plain")
    return HttpResponse(exposition(), content_type=CONTENT_TYPE_LATEST)
