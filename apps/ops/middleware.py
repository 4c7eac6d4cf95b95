"""Content-Security-Policy on the staff pages: the operator console, the usage dashboard and the
API docs (settings.MEDIATOR_CSP, MEDIATOR_CSP_PATHS; docs/serving.md). Protocol endpoints answer
JSON to machines and get none; POST / never passes here (mediator_project/entry.py skips it)."""

from __future__ import annotations

from django.conf import settings


class ContentSecurityPolicyMiddleware:
    """Adds settings.MEDIATOR_CSP to responses under one of settings.MEDIATOR_CSP_PATHS."""

    def __init__(self, get_response):
        self.get_response = get_response
        self.policy = settings.MEDIATOR_CSP
        self.prefixes = tuple(settings.MEDIATOR_CSP_PATHS)

    def __call__(self, request):
        response = self.get_response(request)
        if self.policy and request.path.startswith(self.prefixes):
            response.headers.setdefault("Content-Security-Policy", self.policy)
        return response
