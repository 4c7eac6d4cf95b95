"""The project's error pages (`handler400`, `handler404`, `handler500` in urls.py): what Django
answers outside a view's own replies, in the shape of the surface the path belongs to instead of
Django's HTML pages. The operator console (`/admin/`, `/dashboard/`) keeps Django's pages; with
DEBUG on, Django shows its technical pages instead of any of these.

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

from django.http import HttpRequest, HttpResponse, JsonResponse
from django.views import defaults

from apps.decentrl.views import protocol_json
from apps.didcomm.dispatch import problem_message
from apps.didcomm.protocols import Code
from apps.wire.errors import ErrorCode, error_body

HTML_SURFACES = ("/admin/", "/dashboard/")


def under_didcomm(path: str) -> bool:
    """Whether `path` belongs to the DIDComm front door (its errors are problem reports)."""
    return path == "/didcomm" or path.startswith("/didcomm/")


def _machine_error(
    path: str, status: int, *, detail: str, didcomm: tuple[str, str, int], decentrl: ErrorCode
) -> HttpResponse:
    """The error of a machine-facing `path`: DRF's shape under /api/, text on /metrics, the health
    shape on /health, a problem report under /didcomm, and Decentrl's shape everywhere else."""
    if path.startswith("/api/"):
        return JsonResponse({"detail": detail.capitalize() + "."}, status=status)
    if path == "/metrics":
        return HttpResponse(f"{detail}\n", status=status, content_type="text/plain")
    if path == "/health":
        return JsonResponse({"status": "error", "detail": detail}, status=status)
    if under_didcomm(path):
        code, comment, problem_status = didcomm
        return JsonResponse(problem_message(code, comment, pthid=None), status=problem_status)
    return protocol_json(error_body(decentrl), decentrl.http_status)


def bad_request(request: HttpRequest, exception: Exception) -> HttpResponse:
    path = request.path_info
    if path.startswith(HTML_SURFACES):
        return defaults.bad_request(request, exception)
    return _machine_error(
        path,
        400,
        detail="bad request",
        didcomm=(Code.MALFORMED, "bad request", 400),
        decentrl=ErrorCode.INVALID_COMMAND,
    )


def not_found(request: HttpRequest, exception: Exception) -> HttpResponse:
    path = request.path_info
    if path.startswith(HTML_SURFACES):
        return defaults.page_not_found(request, exception)
    return _machine_error(
        path,
        404,
        detail="not found",
        didcomm=(Code.UNKNOWN_MEDIATOR, "no DIDComm endpoint at this path", 404),
        decentrl=ErrorCode.UNKNOWN_MEDIATOR,
    )


def server_error(request: HttpRequest) -> HttpResponse:
    path = request.path_info
    if path.startswith(HTML_SURFACES):
        return defaults.server_error(request)
    return _machine_error(
        path,
        500,
        detail="a server error occurred",
        didcomm=(Code.UNAVAILABLE, "mediator unavailable", 503),
        decentrl=ErrorCode.MEDIATOR_UNAVAILABLE,
    )
