"""The project's error pages (`handler400`, `handler403`, `handler404`, `handler500` in urls.py): what
Django answers outside a view's own replies, in the shape of the surface the path belongs to instead
of Django's HTML pages. The operator console (`/admin/`, `/dashboard/`) keeps Django's pages, except
its refusal (403), which a staff member sees inside the console's frame, saying why and leading back;
with DEBUG on, Django shows its technical pages instead of the 400, 404 and 500 ones.

- 400: a request Django refuses before or outside a view (a SuspiciousOperation: a Host header that
  is not a host name, more query parameters than DATA_UPLOAD_MAX_NUMBER_FIELDS, …).
- 404: a path no route serves. On the protocol surfaces that is "no mediator here", as for a
  WebSocket upgrade to such a path (asgi.py's catch-all): `UNKNOWN_MEDIATOR`, or the problem report
  `e.p.xfer.unknown-mediator` under `/didcomm/`.
- 500: an exception no view answered (a defect of ours; Django logs it with its traceback first).
  The protocol surfaces answer it as their own entries answer theirs: `MEDIATOR_UNAVAILABLE` 503,
  or `e.p.me.unavailable` 503 under `/didcomm/`.
"""

from __future__ import annotations

from django.contrib import admin
from django.http import HttpRequest, HttpResponse, JsonResponse
from django.shortcuts import render
from django.views import defaults

from apps.decentrl.views import protocol_json
from apps.didcomm.problems import problem_message
from apps.didcomm.protocols import Code
from apps.wire.errors import ErrorCode, error_body

HTML_SURFACES = ("/admin/", "/dashboard/")


def under_didcomm(path: str) -> bool:
    """Whether `path` belongs to the DIDComm front door (its errors are problem reports)."""
    return path == "/didcomm" or path.startswith("/didcomm/")


# Per status: the detail (JSON under /api/, /health, text on /metrics), the DIDComm problem report
# (code, comment, HTTP status) and the Decentrl error (its own HTTP status).
_SHAPES = {
    400: ("bad request", (Code.MALFORMED, "bad request", 400), ErrorCode.INVALID_COMMAND),
    404: ("not found", (Code.UNKNOWN_MEDIATOR, "no DIDComm endpoint at this path", 404), ErrorCode.UNKNOWN_MEDIATOR),
    500: ("a server error occurred", (Code.UNAVAILABLE, "mediator unavailable", 503), ErrorCode.MEDIATOR_UNAVAILABLE),
}


def _error(request: HttpRequest, status: int, html) -> HttpResponse:
    """`html()` (Django's page) on the console; elsewhere the shape of the path's surface: DRF's
    under /api/, text on /metrics, the health shape on /health, a problem report under /didcomm,
    and Decentrl's everywhere else."""
    path = request.path_info
    if path.startswith(HTML_SURFACES):
        return html()
    detail, (code, comment, problem_status), decentrl = _SHAPES[status]
    if path.startswith("/api/"):
        return JsonResponse({"detail": detail.capitalize() + "."}, status=status)
    if path == "/metrics":
        return HttpResponse(f"{detail}\n", status=status, content_type="text/plain")
    if path == "/health":
        return JsonResponse({"status": "error", "detail": detail}, status=status)
    if under_didcomm(path):
        return JsonResponse(problem_message(code, comment, pthid=None), status=problem_status)
    return protocol_json(error_body(decentrl), decentrl.http_status)


def bad_request(request: HttpRequest, exception: Exception) -> HttpResponse:
    return _error(request, 400, lambda: defaults.bad_request(request, exception))


def permission_denied(request: HttpRequest, exception: Exception) -> HttpResponse:
    """403: on the console, for a staff member (the only one a console view refuses rather than
    sends to the login), a console page that says what was refused and leads back; elsewhere
    Django's page (DRF answers its own 403s under /api/)."""
    user = getattr(request, "user", None)
    if request.path_info.startswith(HTML_SURFACES) and user is not None and user.is_active and user.is_staff:
        context = {**admin.site.each_context(request), "title": "Not allowed", "reason": str(exception)}
        return render(request, "console/refused.html", context, status=403)
    return defaults.permission_denied(request, exception)


def not_found(request: HttpRequest, exception: Exception) -> HttpResponse:
    return _error(request, 404, lambda: defaults.page_not_found(request, exception))


def server_error(request: HttpRequest) -> HttpResponse:
    return _error(request, 500, lambda: defaults.server_error(request))
