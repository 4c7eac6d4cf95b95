"""Host → Tenant resolution (PROTOCOL-DECISIONS §7). Sets request.tenant (None when unknown).

When the database is unreachable no tenant can be resolved: /health answers its 503 shape and
everything else the protocol's MEDIATOR_UNAVAILABLE, never a 500.
"""

from __future__ import annotations

import logging

from django.db import DatabaseError
from django.http import JsonResponse

from .selectors import tenant_for_host

log = logging.getLogger("mediator.tenants")


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
