"""HTTP method rules for the machine-facing endpoints (protocol endpoints, /health, /metrics).

Django's `require_http_methods` answers another method with an empty `text/html` 405, and a
view that is not csrf_exempt answers an unsafe one with the CSRF failure page (an HTML 403)
before that. These endpoints read no cookie and change nothing a browser session could be
tricked into, so `allow_methods` exempts them from CSRF and answers any other method with the
endpoint's own error shape, status 405 and `Allow`.
"""

from __future__ import annotations

from collections.abc import Callable
from functools import wraps

from django.http import HttpRequest, HttpResponse
from django.views.decorators.csrf import csrf_exempt


def allow_methods(methods: tuple[str, ...], refusal: Callable[[], HttpResponse]):
    """Decorate a view: `methods` reach it; any other gets `refusal()` as a 405 with `Allow`."""

    def decorate(view):
        @csrf_exempt
        @wraps(view)
        def allowed(request: HttpRequest, *args, **kwargs) -> HttpResponse:
            if request.method not in methods:
                response = refusal()
                response.status_code = 405
                response["Allow"] = ", ".join(methods)
                return response
            return view(request, *args, **kwargs)

        return allowed

    return decorate
