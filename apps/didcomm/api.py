"""Operator API for DIDComm grants under /api/v1/didcomm/ (docs/operators.md): list grants with
their recipient DIDs and queue depths, revoke one. Same authentication and model permissions as
the rest of the operator API (apps/tenants/permissions.py)."""

from __future__ import annotations

from django.shortcuts import get_object_or_404
from rest_framework import viewsets
from rest_framework.decorators import action
from rest_framework.request import Request
from rest_framework.response import Response

from apps.tenants.services import Actor

from .models import Mediation
from .selectors import grants_with_depths, queued_for, recipient_depths
from .services import mediation_revoke

# Grant actions and the Django permission verb each needs on didcomm.Mediation.
GRANT_ACTIONS = {"list": "view", "retrieve": "view", "revoke": "change"}


def _grant(m: Mediation, *, detail: bool) -> dict:
    out = {
        "id": m.pk,
        "tenant": m.tenant.slug,
        "client_did": m.client_did,
        "state": m.state,
        "created_at": m.created_at,
        "queued": queued_for(mediation=m),
    }
    if detail:
        out["recipients"] = recipient_depths(mediation=m)
    else:
        out["recipients"] = m.n_recipients
    return out


class GrantViewSet(viewsets.GenericViewSet):
    """DIDComm mediation grants: list (optionally `?tenant=<slug>`), read, revoke."""

    operator_actions = GRANT_ACTIONS
    queryset = Mediation.objects.none()

    def list(self, request: Request) -> Response:
        qs = grants_with_depths()
        if request.query_params.get("tenant"):
            qs = qs.filter(tenant__slug=request.query_params["tenant"])
        page = self.paginate_queryset(qs)
        return self.get_paginated_response([_grant(m, detail=False) for m in page])

    def retrieve(self, request: Request, pk: str) -> Response:
        m = get_object_or_404(Mediation.objects.select_related("tenant"), pk=pk)
        return Response(_grant(m, detail=True))

    @action(detail=True, methods=["post"])
    def revoke(self, request: Request, pk: str) -> Response:
        m = get_object_or_404(Mediation.objects.select_related("tenant"), pk=pk)
        m = mediation_revoke(mediation=m, actor=Actor(user=request.user, via="api"))
        return Response(_grant(m, detail=True))
