"""GET /metrics: Prometheus exposition, for a bearer token or internal addresses only."""

from __future__ import annotations

import hmac
import ipaddress
from functools import lru_cache

from django.conf import settings
from django.http import HttpRequest, HttpResponse
from prometheus_client import CONTENT_TYPE_LATEST

from .http import allow_methods
from .metrics import exposition


@lru_cache(maxsize=8)
def _networks(spec: tuple[str, ...]) -> tuple:
    return tuple(ipaddress.ip_network(n.strip(), strict=False) for n in spec if n.strip())


def _internal(addr: str) -> bool:
    """Inside MEDIATOR_METRICS_INTERNAL_NETWORKS (loopback and RFC 1918 / RFC 4193 by default).

    An explicit list, not ipaddress' is_private, which also counts the documentation ranges."""
    try:
        ip = ipaddress.ip_address(addr.strip())
    except ValueError:
        return False
    if ip.version == 6 and ip.ipv4_mapped is not None:
        ip = ip.ipv4_mapped
    return any(ip in net for net in _networks(tuple(settings.MEDIATOR_METRICS_INTERNAL_NETWORKS)))


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


@allow_methods(("GET",), lambda: HttpResponse("method not allowed\n", content_type="text/plain"))
def metrics(request: HttpRequest) -> HttpResponse:
    if not metrics_allowed(request):
        return HttpResponse("forbidden\n", status=403, content_type="text/plain")
    return HttpResponse(exposition(), content_type=CONTENT_TYPE_LATEST)
