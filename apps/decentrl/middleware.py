"""CORS for the protocol endpoints (DCTRL-0004 §3.4): origins * (or MEDIATOR_CORS_ORIGINS),
methods GET, POST, OPTIONS, header Content-Type. The admin and operator API get no CORS headers."""

from __future__ import annotations

import re

from django.conf import settings
from django.core.exceptions import ImproperlyConfigured
from django.http import HttpResponse

_PRIVATE_PREFIXES = ("/admin", "/api/", "/static/", "/dashboard")


def cors_headers(origin: str | None, origins: list[str] | None = None) -> list[tuple[str, str]]:
    """The CORS headers of a protocol reply to a request from `origin` (none for a disallowed
    origin); `origins` is MEDIATOR_CORS_ORIGINS unless given."""
    origins = settings.MEDIATOR_CORS_ORIGINS if origins is None else origins
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


# What an origin may look like inside nginx's configuration (scheme, host, port; no quotes,
# spaces or semicolons that would end the directive).
_SAFE_ORIGIN = re.compile(r"^[A-Za-z][A-Za-z0-9+.-]*://[A-Za-z0-9.\-\[\]:]+$")


def _check_origins(origins: list[str]) -> None:
    """Refuse an entry of MEDIATOR_CORS_ORIGINS that is not an origin: it is written into the
    configuration of nginx and of the cluster's balancer."""
    for origin in origins:
        if not _SAFE_ORIGIN.match(origin):
            raise ImproperlyConfigured(f"MEDIATOR_CORS_ORIGINS: {origin!r} is not an origin (scheme://host[:port])")


def nginx_cors_maps(origins: list[str]) -> str:
    """The same rule as `cors_headers`, as nginx `map` directives for the headers of the replies
    nginx makes itself (deploy/nginx.conf.template): $cors_origin, $cors_vary, $cors_methods,
    $cors_headers and $cors_max_age, empty (so not sent) for a disallowed origin. One line, for
    scripts/run_production.sh to put in the template."""
    if "*" in origins:
        values = dict(cors_headers(None, origins))
        origin_map = 'map $http_origin $cors_origin { default "*"; }'
    else:
        _check_origins(origins)
        values = dict(cors_headers(origins[0], origins)) if origins else {}
        listed = " ".join(f'"{origin}" $http_origin;' for origin in origins)
        origin_map = f'map $http_origin $cors_origin {{ default ""; {listed} }}'
    derived = [
        ("cors_vary", values.get("Vary", "")),
        ("cors_methods", values.get("Access-Control-Allow-Methods", "")),
        ("cors_headers", values.get("Access-Control-Allow-Headers", "")),
        ("cors_max_age", values.get("Access-Control-Max-Age", "")),
    ]
    maps = [origin_map] + [f'map $cors_origin ${name} {{ "" ""; default "{value}"; }}' for name, value in derived]
    return " ".join(maps)


def haproxy_cors(origins: list[str]) -> tuple[list[str], str]:
    """The same rule as `cors_headers`, for the replies the simulated cluster's balancer makes
    itself (deploy/cluster/haproxy.cfg.template): `http-request` rules keeping each header's value
    in a variable (txn.cors_allow_origin, …), set only for an allowed origin, and the `hdr`
    arguments of an `http-error` sending them (HAProxy leaves out a header whose value is empty).
    For scripts/cluster/render_lb.sh to put in the template."""
    if "*" in origins:
        headers = cors_headers(None, origins)
        rules, condition = [], ""
    elif origins:
        _check_origins(origins)
        headers = [
            (name, "%[req.fhdr(origin)]" if name == "Access-Control-Allow-Origin" else value)
            for name, value in cors_headers(origins[0], origins)
        ]
        rules, condition = [f"acl cors_allowed req.fhdr(origin) -m str {' '.join(origins)}"], " if cors_allowed"
    else:
        return [], ""
    variables = {
        name: "txn.cors_" + name.lower().removeprefix("access-control-").replace("-", "_") for name, _ in headers
    }
    rules += [f'http-request set-var-fmt({variables[name]}) "{value}"{condition}' for name, value in headers]
    return rules, " ".join(f'hdr {name} "%[var({variable})]"' for name, variable in variables.items())


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
