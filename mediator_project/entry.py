"""The production entry of both protocols, in both layouts (Granian in production,
mediator_project/http_server.py; `make run`'s Daphne through mediator_project/asgi.py;
docs/serving.md): `ProtocolWSGIApplication` hands `POST /` (Decentrl) and `POST /didcomm` (DIDComm)
each to a `CommandEntry` with its protocol's two functions of one signature each (`http_reply`: the
reply, and `http_unavailable`: the answer when the entry itself fails; `decentrl.dispatch`,
`didcomm.dispatch`), everything else to Django's own WSGIHandler.

A `CommandEntry` is the one HTTP entry of a protocol. It does what the middlewares would do for a
protocol POST, without building Django request and response objects (the full request cycle is a
large share of a command's CPU): the database connections' handling of Django's request signals
(`ops.dbconn.request_begins` and `request_ends`, called directly: the signals' dispatch and the
receivers that never concern a command cost as much as the rest of the entry), tenant resolution
(as TenantMiddleware), the body cap, the protocol's reply, and the headers of `response_headers`
(CORS and the security headers, from the same code the middlewares run).

It answers every protocol POST but one kind, which it hands to Django: an insecure request under
SECURE_SSL_REDIRECT, which SecurityMiddleware redirects before any view. So each protocol has one
way in: Django has no view that answers a protocol POST. PREPEND_WWW and DISALLOWED_USER_AGENTS
stop it from starting (`check_middleware`): CommonMiddleware's redirect of a protocol POST would be
followed as a GET and lose the command, and a user-agent ban is not a protocol rule (refuse those at
nginx). A middleware it neither replicates nor knows to be irrelevant to a protocol POST stops it
from starting too (ImproperlyConfigured), so a new middleware cannot silently miss the command path;
so does a receiver of `request_started` or `request_finished` it does not know
(`check_request_signals`). tests/serving/test_entry.py checks that its headers are the middlewares'.
"""

from __future__ import annotations

import functools
import logging
import weakref
from collections.abc import Callable
from http.client import responses
from typing import Protocol

from django.conf import settings
from django.core import signals
from django.core.exceptions import ImproperlyConfigured
from django.core.handlers.wsgi import WSGIHandler
from django.core.signals import setting_changed
from django.db import DatabaseError
from django.dispatch import receiver
from django.http import HttpRequest, HttpResponse

from apps.decentrl import dispatch as decentrl
from apps.decentrl.middleware import cors_headers
from apps.didcomm import dispatch as didcomm
from apps.ops import dbconn
from apps.ops.clientip import forwarded_client
from apps.ops.logconfig import code_path
from apps.tenants.models import Tenant
from apps.tenants.selectors import tenant_for_host

log = logging.getLogger("mediator.command")

# What CommandEntry does by hand (outermost first), and what never concerns a protocol POST:
# sessions, users, messages and CSRF belong to the admin and the dashboard (the entry reads none of
# them), and static files are never served at a protocol path.
REPLICATED = (
    "apps.decentrl.middleware.CorsMiddleware",
    "django.middleware.security.SecurityMiddleware",
    "apps.tenants.middleware.TenantMiddleware",
    "django.middleware.common.CommonMiddleware",
    "django.middleware.clickjacking.XFrameOptionsMiddleware",
)
IRRELEVANT = frozenset(
    {
        "apps.tenants.middleware.OperatorHostMiddleware",
        "apps.ops.middleware.ContentSecurityPolicyMiddleware",
        "whitenoise.middleware.WhiteNoiseMiddleware",
        "django.contrib.sessions.middleware.SessionMiddleware",
        "django.middleware.csrf.CsrfViewMiddleware",
        "django.contrib.auth.middleware.AuthenticationMiddleware",
        "django.contrib.messages.middleware.MessageMiddleware",
    }
)
# The receivers of Django's request signals, and what CommandEntry does for each (by name: module
# and qualified name). Django 5.2's own: `close_old_connections` (both ends) and `reset_queries`
# (start, the DEBUG query log), from django.db; `close_caches` and `reset_urlconf` (end); ours:
# the dead-connection poll (apps/ops/dbconn.py).
SIGNAL_RECEIVERS = {
    "request_started": {
        "django.db.close_old_connections": "dbconn.request_begins",
        "django.db.reset_queries": "dbconn.request_begins, under DEBUG (the only time queries are logged)",
        "apps.ops.dbconn.close_dead_idle_connections": "dbconn.request_begins",
    },
    "request_finished": {
        "django.db.close_old_connections": "dbconn.request_ends",
        "django.core.cache.close_caches": "nothing: no command touches Django's cache",
        "django.core.handlers.base.reset_urlconf": "nothing: no command sets a urlconf",
    },
}
_JSON = ("Content-Type", "application/json")


def is_secure(environ) -> bool:
    """HttpRequest.is_secure() for a WSGI environ (SECURE_PROXY_SSL_HEADER, else the URL scheme)."""
    if settings.SECURE_PROXY_SSL_HEADER:
        header, secure_value = settings.SECURE_PROXY_SSL_HEADER
        value = environ.get(header)
        if value is not None:
            return value.split(",", 1)[0].strip() == secure_value
    return environ.get("wsgi.url_scheme") == "https"


class _ProbeRequest(HttpRequest):
    def __init__(self, secure: bool) -> None:
        super().__init__()
        self._secure = secure

    def is_secure(self) -> bool:
        return self._secure


@functools.cache
def security_headers(secure: bool) -> tuple[tuple[str, str], ...]:
    """The headers SecurityMiddleware and XFrameOptionsMiddleware put on a reply to a (secure or
    plain) request under the current settings, taken from the middlewares themselves (HSTS only
    on secure requests, as they do)."""
    from django.middleware.clickjacking import XFrameOptionsMiddleware
    from django.middleware.security import SecurityMiddleware

    probe = HttpResponse()
    request = _ProbeRequest(secure)
    SecurityMiddleware(lambda r: probe).process_response(request, probe)
    XFrameOptionsMiddleware(lambda r: probe).process_response(request, probe)
    return tuple((k, v) for k, v in probe.items() if k != "Content-Type")


@receiver(setting_changed)
def _settings_changed(**kwargs) -> None:
    security_headers.cache_clear()


def response_headers(environ) -> list[tuple[str, str]]:
    """Security and CORS headers of a protocol reply to the request `environ` describes."""
    return [*security_headers(is_secure(environ)), *cors_headers(environ.get("HTTP_ORIGIN"))]


Headers = list[tuple[str, str]]


class HttpReply(Protocol):
    """A protocol's reply to its POST: (the body as read, or None when over the deployment's cap;
    the tenant of the Host, or None; the client's address; the Content-Type) → (status, headers
    without Content-Length, body). Never raises for client input."""

    def __call__(
        self, raw: bytes | None, tenant: Tenant | None, client: str | None, content_type: str | None, /
    ) -> tuple[int, Headers, bytes]: ...


class CommandEntry:
    """A protocol's POST as WSGI (see the module docstring): `reply` answers it, `unavailable()` is
    the answer when the entry itself fails (never a 500)."""

    def __init__(self, reply: HttpReply, unavailable: Callable[[], tuple[int, Headers, bytes]]) -> None:
        self.reply, self.unavailable = reply, unavailable

    def __call__(self, environ, start_response):
        try:
            dbconn.request_begins()
            status, headers, body = self._reply(environ)
        except Exception as exc:  # noqa: BLE001 - never a 500 (dispatch.handle itself never raises)
            log.error(
                "unexpected error in the command entry: %s at %s",
                type(exc).__name__,
                code_path(exc),
            )
            status, headers, body = self.unavailable()
        headers = [*headers, ("Content-Length", str(len(body))), *response_headers(environ)]
        start_response(f"{status} {responses.get(status, 'Unknown Status Code')}", headers)
        # The request ends here, not when the server closes the body: the reply is complete, and
        # Granian never closes a list (it writes its bytes at once). Nothing here may turn the
        # reply into a 500.
        try:
            dbconn.request_ends()
        except Exception as exc:  # noqa: BLE001
            log.error("closing database connections failed after a command: %s", type(exc).__name__)
        return [body]

    def _reply(self, environ) -> tuple[int, Headers, bytes]:
        # TenantMiddleware
        host = environ.get("HTTP_HOST") or environ.get("SERVER_NAME", "")
        try:
            tenant = tenant_for_host(host)
        except DatabaseError:
            log.warning("database unreachable while resolving the tenant")
            # What TenantMiddleware answers, whatever the path (as in Django's chain).
            return 503, [_JSON], b'{"type": "ERROR", "code": "MEDIATOR_UNAVAILABLE"}'
        # The body as WSGIRequest.body reads it (Content-Length, capped before reading).
        try:
            length = int(environ.get("CONTENT_LENGTH") or 0)
        except (ValueError, TypeError):
            length = 0
        cap = settings.DATA_UPLOAD_MAX_MEMORY_SIZE
        if cap is not None and length > cap:
            raw = None
        else:
            raw = environ["wsgi.input"].read(length) if length > 0 else b""
        client = forwarded_client(environ.get("REMOTE_ADDR"), environ.get("HTTP_X_FORWARDED_FOR"))
        return self.reply(raw, tenant, client, environ.get("CONTENT_TYPE"))


def check_middleware() -> None:
    """Refuse to start when settings.MIDDLEWARE has one CommandEntry would silently skip, or
    CommonMiddleware is set to do what no protocol POST may get (PREPEND_WWW's redirect,
    DISALLOWED_USER_AGENTS' 403)."""
    unhonoured = [name for name in ("PREPEND_WWW", "DISALLOWED_USER_AGENTS") if getattr(settings, name)]
    if unhonoured:
        raise ImproperlyConfigured(
            f"POST / and POST /didcomm do not honour {' or '.join(unhonoured)}: a redirected protocol POST "
            "is re-sent as a GET and a user-agent ban is not a protocol rule (refuse user agents at nginx)"
        )
    unknown = [m for m in settings.MIDDLEWARE if m not in REPLICATED and m not in IRRELEVANT]
    if unknown:
        raise ImproperlyConfigured(
            f"POST / does not run {', '.join(unknown)}: replicate it in mediator_project/entry.py "
            "(CommandEntry) or list it there as irrelevant to commands"
        )


def _receiver_names(signal) -> list[str]:
    """`module.qualname` of each live receiver of `signal`, from Django 5.2's `Signal.receivers`
    entries ((lookup key, receiver or its weak reference, is_async); tests/serving/test_entry.py
    checks that Django's own receivers are found, so a Django that changes them fails there)."""
    names = []
    for _key, ref, _is_async in signal.receivers:
        fn = ref() if isinstance(ref, weakref.ReferenceType) else ref
        if fn is not None:
            names.append(f"{getattr(fn, '__module__', '?')}.{getattr(fn, '__qualname__', repr(fn))}")
    return names


def check_request_signals() -> None:
    """Refuse to start when a request signal has a receiver CommandEntry would silently skip."""
    for name, signal in (("request_started", signals.request_started), ("request_finished", signals.request_finished)):
        unknown = [r for r in _receiver_names(signal) if r not in SIGNAL_RECEIVERS[name]]
        if unknown:
            raise ImproperlyConfigured(
                f"POST / does not send {name}, so {', '.join(unknown)} would not run for commands: "
                "do what it does in mediator_project/entry.py (CommandEntry) and list it in SIGNAL_RECEIVERS"
            )


class ProtocolWSGIApplication:
    """Each of `routes` (a POST path → its CommandEntry) to its entry, everything else (and an
    insecure POST under SECURE_SSL_REDIRECT, for its redirect) to Django."""

    def __init__(self, routes: dict[str, CommandEntry]) -> None:
        check_middleware()
        check_request_signals()
        self.django = WSGIHandler()
        self.routes = dict(routes)

    def __call__(self, environ, start_response):
        if (
            environ.get("REQUEST_METHOD") == "POST"
            and (entry := self.routes.get(environ.get("PATH_INFO"))) is not None
            and not (settings.SECURE_SSL_REDIRECT and not is_secure(environ))
        ):
            return entry(environ, start_response)
        return self.django(environ, start_response)


def protocol_application() -> ProtocolWSGIApplication:
    """The production application: `POST /` to Decentrl's entry, `POST /didcomm` to DIDComm's."""
    return ProtocolWSGIApplication(
        {
            "/": CommandEntry(decentrl.http_reply, decentrl.http_unavailable),
            "/didcomm": CommandEntry(didcomm.http_reply, didcomm.http_unavailable),
        }
    )
