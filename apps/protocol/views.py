"""HTTP endpoints of DCTRL-0004 §3. POST / is a plain Django view: the signed bytes reach the
verifier untouched (no DRF parsing in front of them)."""

from __future__ import annotations

from django.db import DatabaseError, connection
from django.http import HttpRequest, HttpResponse, JsonResponse
from django.http.request import RawPostDataException
from django.core.exceptions import RequestDataTooBig
from django.views.decorators.csrf import csrf_exempt
from django.views.decorators.http import require_http_methods

from apps.protocol.wire.canonical import canonical_str
from apps.protocol.wire.errors import ErrorCode, error_body

from .dispatch import handle


def protocol_json(body: dict, status: int = 200, retry_after: int | None = None) -> HttpResponse:
    response = HttpResponse(canonical_str(body), status=status, content_type="application/json")
    if retry_after is not None:
        response["Retry-After"] = str(retry_after)
    return response


def _error(code: ErrorCode) -> HttpResponse:
    return protocol_json(error_body(code), code.http_status)


@csrf_exempt
@require_http_methods(["GET", "POST", "HEAD"])
def root(request: HttpRequest) -> HttpResponse:
    """GET / → DID document; POST / → a command."""
    if request.method == "POST":
        return command(request)
    return did_document(request)


def did_document(request: HttpRequest) -> HttpResponse:
    """The tenant's DID document exactly as DCTRL-0004 §3.2."""
    tenant = request.tenant
    if tenant is None:
        return _error(ErrorCode.UNKNOWN_MEDIATOR)
    if not tenant.is_active:
        return _error(ErrorCode.MEDIATOR_UNAVAILABLE)
    return JsonResponse(tenant.did_document(), json_dumps_params={"separators": (",", ":")})


def command(request: HttpRequest) -> HttpResponse:
    try:
        raw = request.body
    except (RequestDataTooBig, RawPostDataException):
        return _error(ErrorCode.PAYLOAD_TOO_LARGE)
    outcome, reply = handle(raw, request.tenant, "http", client_ip(request))
    response = HttpResponse(reply, status=outcome.status, content_type="application/json")
    if outcome.retry_after is not None:
        response["Retry-After"] = str(outcome.retry_after)
    return response


def client_ip(request: HttpRequest) -> str | None:
    """The peer address (a trusted proxy's X-Forwarded-For is for the deployment to configure)."""
    return request.META.get("REMOTE_ADDR")


@require_http_methods(["GET", "HEAD"])
def health(request: HttpRequest) -> HttpResponse:
    """200 {"status":"ok"} or 503 {"status":"error","detail":...} (DCTRL-0004 §3.3)."""
    try:
        with connection.cursor() as cur:
            cur.execute("SELECT 1")
    except DatabaseError:
        return JsonResponse({"status": "error", "detail": "database unreachable"}, status=503)
    tenant = getattr(request, "tenant", None)
    if tenant is not None and not tenant.is_active:
        return JsonResponse({"status": "error", "detail": "mediator suspended"}, status=503)
    return JsonResponse({"status": "ok"})
