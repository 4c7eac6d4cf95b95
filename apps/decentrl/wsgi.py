"""The production WSGI application (gunicorn, docs/serving.md): Django's WSGIHandler, with
exactly `POST /` (every protocol command) sent to a handler that skips what a command never uses.

A command's request cycle in the full handler runs ten middlewares and the URL resolver around a
view that reads the body and calls `dispatch.handle`; issue 8 measured that cycle at about a third
of a TWO_WAY_PRIVATE's worker CPU (docs/benchmarks.md). `MEDIATOR_COMMAND_ENTRY` picks:

- `bare` (default): `BareCommandApp`, a WSGI callable that does what the kept middlewares and the
  view do for `POST /`, without building Django request and response objects: the
  `request_started`/`request_finished` signals (database connections are handled exactly as
  before), tenant resolution, the body size cap, `dispatch.handle`, and the CORS, security,
  X-Frame-Options and Content-Length headers. It is used only when `settings.MIDDLEWARE` is the
  list it replicates and no redirecting or HSTS security setting is on; otherwise `lean` is used;
- `lean`: `CommandHandler`, Django's own `WSGIHandler` whose middleware chain is
  `settings.MIDDLEWARE` minus `SKIPPED_FOR_COMMANDS`, ending directly in `views.command`;
- `full`: commands go through the full handler like everything else.

tests/decentrl/test_lean_entry.py checks that all three give the same status, headers and body.
"""

from __future__ import annotations

import logging
import traceback
from http.client import responses

from django.conf import settings
from django.core import signals
from django.core.exceptions import ImproperlyConfigured
from django.core.handlers.exception import convert_exception_to_response
from django.core.handlers.wsgi import WSGIHandler
from django.db import DatabaseError
from django.http import HttpRequest, HttpResponse
from django.utils.module_loading import import_string

from apps.ops.clientip import forwarded_client
from apps.tenants.selectors import tenant_for_host
from apps.wire.canonical import canonical_bytes
from apps.wire.errors import ErrorCode, error_body

from .dispatch import handle
from .middleware import cors_headers
from .views import command

log = logging.getLogger("mediator.command")

# Sessions, users, messages and CSRF belong to the admin and the dashboard; static files are
# never served at "/". The view of POST / is csrf_exempt and reads none of them. The operator-host
# rule covers /admin/, /api/v1/ and /dashboard/ only, never "/".
SKIPPED_FOR_COMMANDS = frozenset(
    {
        "apps.tenants.middleware.OperatorHostMiddleware",
        "whitenoise.middleware.WhiteNoiseMiddleware",
        "django.contrib.sessions.middleware.SessionMiddleware",
        "django.middleware.csrf.CsrfViewMiddleware",
        "django.contrib.auth.middleware.AuthenticationMiddleware",
        "django.contrib.messages.middleware.MessageMiddleware",
    }
)


class CommandHandler(WSGIHandler):
    """WSGIHandler whose middleware chain ends in `views.command` with no URL resolving."""

    def load_middleware(self, is_async: bool = False) -> None:
        handler = convert_exception_to_response(command)
        for path in reversed(settings.MIDDLEWARE):
            if path in SKIPPED_FOR_COMMANDS:
                continue
            middleware = import_string(path)
            # Hooks run by the URL-resolving part of the cycle, which this handler does not have.
            for hook in ("process_view", "process_exception", "process_template_response"):
                if hasattr(middleware, hook):
                    raise ImproperlyConfigured(
                        f"{path}.{hook} would not run for POST /: list it in SKIPPED_FOR_COMMANDS"
                    )
            handler = convert_exception_to_response(middleware(handler))
        self._view_middleware = []
        self._template_response_middleware = []
        self._exception_middleware = []
        self._middleware_chain = handler


# What BareCommandApp does by hand, in this order (outermost first).
BARE_REPLICATES = (
    "apps.decentrl.middleware.CorsMiddleware",
    "django.middleware.security.SecurityMiddleware",
    "apps.tenants.middleware.TenantMiddleware",
    "django.middleware.common.CommonMiddleware",
    "django.middleware.clickjacking.XFrameOptionsMiddleware",
)
_JSON = ("Content-Type", "application/json")


def bare_supported() -> bool:
    """True when BareCommandApp gives exactly what CommandHandler would under these settings."""
    kept = tuple(m for m in settings.MIDDLEWARE if m not in SKIPPED_FOR_COMMANDS)
    return (
        kept == BARE_REPLICATES
        and not settings.SECURE_SSL_REDIRECT
        and not settings.SECURE_HSTS_SECONDS
        and not settings.DISALLOWED_USER_AGENTS
        and not settings.PREPEND_WWW
    )


class _Finished(list):
    """The response body; closing it ends the request as Django's responses do."""

    def close(self) -> None:
        signals.request_finished.send(sender=BareCommandApp)


class BareCommandApp:
    """`POST /` with no Django request/response objects (see the module docstring)."""

    def __init__(self) -> None:
        # The headers SecurityMiddleware and XFrameOptionsMiddleware put on every reply, taken
        # from the middlewares themselves under the current settings.
        from django.middleware.clickjacking import XFrameOptionsMiddleware
        from django.middleware.security import SecurityMiddleware

        probe = HttpResponse()
        request = HttpRequest()
        SecurityMiddleware(lambda r: probe).process_response(request, probe)
        XFrameOptionsMiddleware(lambda r: probe).process_response(request, probe)
        self.static_headers = [(k, v) for k, v in probe.items() if k != "Content-Type"]

    def __call__(self, environ, start_response):
        signals.request_started.send(sender=BareCommandApp, environ=environ)
        try:
            status, headers, body = self._reply(environ)
        except Exception as exc:  # noqa: BLE001 - never a 500 (dispatch.handle itself never raises)
            log.error(
                "unexpected error in the command entry: %s at %s",
                type(exc).__name__,
                " <- ".join(
                    f"{f.filename}:{f.lineno} {f.name}" for f in reversed(traceback.extract_tb(exc.__traceback__))
                ),
            )
            status, headers, body = 503, [], canonical_bytes(error_body(ErrorCode.MEDIATOR_UNAVAILABLE))
        headers = [
            _JSON,
            *headers,
            ("Content-Length", str(len(body))),
            *self.static_headers,
            *cors_headers(environ.get("HTTP_ORIGIN")),
        ]
        start_response(f"{status} {responses.get(status, 'Unknown Status Code')}", headers)
        return _Finished([body])

    def _reply(self, environ) -> tuple[int, list[tuple[str, str]], bytes]:
        # TenantMiddleware
        host = environ.get("HTTP_HOST") or environ.get("SERVER_NAME", "")
        try:
            tenant = tenant_for_host(host)
        except DatabaseError:
            log.warning("database unreachable while resolving the tenant")
            return 503, [], b'{"type": "ERROR", "code": "MEDIATOR_UNAVAILABLE"}'
        # views.command: the body as WSGIRequest.body reads it (Content-Length, capped)
        try:
            length = int(environ.get("CONTENT_LENGTH") or 0)
        except (ValueError, TypeError):
            length = 0
        cap = settings.DATA_UPLOAD_MAX_MEMORY_SIZE
        if cap is not None and length > cap:
            return 413, [], canonical_bytes(error_body(ErrorCode.PAYLOAD_TOO_LARGE))
        raw = environ["wsgi.input"].read(length) if length > 0 else b""
        peer = environ.get("REMOTE_ADDR")
        outcome, reply = handle(raw, tenant, "http", forwarded_client(peer, environ.get("HTTP_X_FORWARDED_FOR")))
        extra = [] if outcome.retry_after is None else [("Retry-After", str(outcome.retry_after))]
        return outcome.status, extra, reply


class ProtocolWSGIApplication:
    """`POST /` to the command entry (MEDIATOR_COMMAND_ENTRY), everything else to Django's own."""

    def __init__(self) -> None:
        self.full = WSGIHandler()
        mode = settings.MEDIATOR_COMMAND_ENTRY
        if mode == "bare" and bare_supported():
            self.commands = BareCommandApp()
        elif mode in ("bare", "lean"):
            self.commands = CommandHandler()
        else:
            self.commands = self.full

    def __call__(self, environ, start_response):
        if environ.get("REQUEST_METHOD") == "POST" and environ.get("PATH_INFO") == "/":
            return self.commands(environ, start_response)
        return self.full(environ, start_response)
