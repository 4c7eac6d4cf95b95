"""The production WSGI application (gunicorn, docs/serving.md): Django's WSGIHandler, with
exactly `POST /` (every protocol command) sent through a second handler that skips what a
command never uses.

A command's request cycle in the full handler runs ten middlewares and the URL resolver around a
view that reads the body and calls `dispatch.handle`. The command handler is the same
`WSGIHandler` (same request and response classes, `request_started`/`request_finished` signals,
so database connections are returned exactly as before, exception-to-response conversion and
error logging) whose middleware chain is `settings.MIDDLEWARE` minus the ones listed in
`SKIPPED_FOR_COMMANDS`, ending directly in `views.command`. The middlewares kept (CORS, security
headers, tenant resolution, Content-Length, X-Frame-Options) give the reply the same headers as
the full chain would; tests/protocol/test_lean_entry.py compares them. Issue 8 measured the
difference in docs/benchmarks.md. `MEDIATOR_LEAN_COMMAND_ENTRY=0` routes commands through the
full handler as well.
"""

from __future__ import annotations

from django.conf import settings
from django.core.exceptions import ImproperlyConfigured
from django.core.handlers.exception import convert_exception_to_response
from django.core.handlers.wsgi import WSGIHandler
from django.utils.module_loading import import_string

# Sessions, users, messages and CSRF belong to the admin and the dashboard; static files are
# never served at "/". The view of POST / is csrf_exempt and reads none of them.
SKIPPED_FOR_COMMANDS = frozenset(
    {
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
        from apps.protocol.views import command

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


class ProtocolWSGIApplication:
    """`POST /` to the command handler, everything else to Django's own."""

    def __init__(self) -> None:
        self.full = WSGIHandler()
        self.commands = CommandHandler() if settings.MEDIATOR_LEAN_COMMAND_ENTRY else self.full

    def __call__(self, environ, start_response):
        if environ.get("REQUEST_METHOD") == "POST" and environ.get("PATH_INFO") == "/":
            return self.commands(environ, start_response)
        return self.full(environ, start_response)
