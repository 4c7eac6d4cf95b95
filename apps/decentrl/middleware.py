"""CORS for the protocol endpoints (DCTRL-0004 §3.4): origins * (or MEDIATOR_CORS_ORIGINS),
methods GET, POST, OPTIONS, header Content-Type. The admin and operator API get no CORS headers."""

from __future__ import annotations

from django.conf import settings
from django.http import HttpResponse

_PRIVATE_PREFIXES = ("/admin", "/api/", "/static/", "/dashboard")


def cors_headers(origin: str | None) -> list[tuple[str, str]]:
    """The CORS headers of a protocol reply to a request from `origin` (none for a disallowed origin)."""
    origins = settings.MEDIATOR_CORS_ORIGINS
    if "*" in origins:
        headers = [("Access-Control-Allow-Origin", "*")]
    elif origin and origin in origins:
        headers = [("Access-Control-Allow-Origin", origin), ("Vary", "Origin")]
    else:
        return []
    return [
        *headers,
        ("Access-Control-Allow-Methods", "GET, POST, OPTIONS"),
        ("Access-Control-Allow-Headers", "Content-Type"),
        ("Access-Control-Max-Age", "86400"),
    ]


class CorsMiddleware:
    def __init__(self, get_response):
        self.get_response = get_response

    def __call__(self, request):
        if request.path.startswith(_PRIVATE_PREFIXES):
            return self.get_response(request)
        if request.method == "OPTIONS":
            response = HttpResponse(status=204)
        else:
            response = self.get_response(request)
        for name, value in cors_headers(request.META.get("HTTP_ORIGIN")):
            response[name] = value
        return response
