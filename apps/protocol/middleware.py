"""CORS for the protocol endpoints (DCTRL-0004 §3.4): origins * (or MEDIATOR_CORS_ORIGINS),
methods GET, POST, OPTIONS, header Content-Type. The admin and operator API get no CORS headers."""

from __future__ import annotations

from django.conf import settings
from django.http import HttpResponse

_PRIVATE_PREFIXES = ("/admin", "/api/", "/static/", "/dashboard")


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
        origins = settings.MEDIATOR_CORS_ORIGINS
        origin = request.META.get("HTTP_ORIGIN")
        if "*" in origins:
            response["Access-Control-Allow-Origin"] = "*"
        elif origin and origin in origins:
            response["Access-Control-Allow-Origin"] = origin
            response["Vary"] = "Origin"
        else:
            return response
        response["Access-Control-Allow-Methods"] = "GET, POST, OPTIONS"
        response["Access-Control-Allow-Headers"] = "Content-Type"
        response["Access-Control-Max-Age"] = "86400"
        return response
