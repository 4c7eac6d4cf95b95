"""Host → Tenant resolution (docs/protocol-readings.md §7). Sets request.tenant (None when unknown).

When the database is unreachable no tenant can be resolved: /health answers its 503 shape and
everything else the protocol's MEDIATOR_UNAVAILABLE, never a 500.

The operator surfaces answer only on MEDIATOR_OPERATOR_HOSTS (OperatorHostMiddleware).
"""

from __future__ import annotations

import logging

from django.conf import settings
from django.db import DatabaseError
from django.http import HttpRequest, HttpResponseNotFound, JsonResponse
from django.http.request import split_domain_port

from .models import Tenant
from .selectors import tenant_for_host

log = logging.getLogger("mediator.tenants")


class TenantRequest(HttpRequest):
    """The type of a request TenantMiddleware has seen (views annotate it; nothing instantiates it)."""

    tenant: Tenant | None  # the tenant serving the request's host, None when no tenant does


class TenantMiddleware:
    def __init__(self, get_response):
        self.get_response = get_response

    def __call__(self, request):
        host = request.META.get("HTTP_HOST") or request.META.get("SERVER_NAME", "")
        try:
            request.tenant = tenant_for_host(host)
        except DatabaseError:
            log.warning("database unreachable while resolving the tenant")
            if request.path == "/health":
                return JsonResponse({"status": "error", "detail": "database unreachable"}, status=503)
            return JsonResponse({"type": "ERROR", "code": "MEDIATOR_UNAVAILABLE"}, status=503)
        return self.get_response(request)


# Every operator and staff page: the console, the operator API with its schema and docs, and the
# usage dashboard with its report pages. Protocol endpoints (POST /, /ws, /public/…, the DID
# document, /health) and /metrics (its own token or network rule) are not among them.
OPERATOR_PATH_PREFIXES = ("/admin/", "/api/v1/", "/dashboard/")


def is_operator_host(host: str) -> bool:
    """Whether MEDIATOR_OPERATOR_HOSTS lists `host` (a bare entry matches the host on any port)."""
    allowed = settings.MEDIATOR_OPERATOR_HOSTS
    if "*" in allowed:
        return True
    domain, port = split_domain_port(host)
    return bool(domain) and (domain in allowed or (bool(port) and f"{domain}:{port}" in allowed))


class OperatorHostMiddleware:
    """Operator surfaces on any other host are a plain 404 (JSON under /api/), so a customer's
    domain or an unclaimed host never shows the console's login page."""

    def __init__(self, get_response):
        self.get_response = get_response

    def __call__(self, request):
        path = request.path_info
        if path.startswith(OPERATOR_PATH_PREFIXES):
            host = request.META.get("HTTP_HOST") or request.META.get("SERVER_NAME", "")
            if not is_operator_host(host):
                if path.startswith("/api/"):
                    # The body DRF gives its own 404s (compact JSON).
                    return JsonResponse(
                        {"detail": "Not found."}, status=404, json_dumps_params={"separators": (",", ":")}
                    )
                return HttpResponseNotFound("Not Found\n", content_type="text/plain; charset=utf-8")
        return self.get_response(request)
