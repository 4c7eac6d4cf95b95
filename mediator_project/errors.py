"""The project's 400 page (`handler400` in urls.py): what Django answers for a request it refuses
before or outside a view (a SuspiciousOperation: a Host header that is not a host name, more query
parameters than DATA_UPLOAD_MAX_NUMBER_FIELDS, …), in the shape of the surface the path belongs
to, instead of Django's HTML page. With DEBUG on, Django shows its technical page instead."""

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


def bad_request(request: HttpRequest, exception: Exception) -> HttpResponse:
    path = request.path_info
    if path.startswith(HTML_SURFACES):
        return defaults.bad_request(request, exception)
    if path.startswith("/api/"):
        return JsonResponse({"detail": "Bad request."}, status=400)  # DRF's error shape
    if path == "/metrics":
        return HttpResponse("bad request\n", status=400, content_type="text/plain")
    if path == "/health":
        return JsonResponse({"status": "error", "detail": "bad request"}, status=400)
    if under_didcomm(path):
        return JsonResponse(problem_message(Code.MALFORMED, "bad request", pthid=None), status=400)
    return protocol_json(error_body(ErrorCode.INVALID_COMMAND), 400)
