"""bench/entry_bench.py's reference only: `POST /` as a plain Django view over the same
decentrl.dispatch.http_reply, behind Django's whole middleware chain (its ROOT_URLCONF in the
bench's process). The product has no such view: the production entry answers every `POST /`."""

from __future__ import annotations

from django.core.exceptions import RequestDataTooBig
from django.http import HttpResponse
from django.http.request import RawPostDataException
from django.urls import path
from django.views.decorators.csrf import csrf_exempt

from apps.decentrl.dispatch import http_reply
from apps.ops.clientip import forwarded_client


@csrf_exempt
def command(request) -> HttpResponse:
    try:
        raw = request.body
    except (RequestDataTooBig, RawPostDataException):
        raw = None
    client = forwarded_client(request.META.get("REMOTE_ADDR"), request.META.get("HTTP_X_FORWARDED_FOR"))
    status, headers, body = http_reply(raw, request.tenant, client, request.META.get("CONTENT_TYPE"))
    return HttpResponse(body, status=status, headers=dict(headers))


urlpatterns = [path("", command)]
