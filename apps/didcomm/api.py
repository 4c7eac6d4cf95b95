"""Operator API under /api/v1/didcomm/ (docs/didcomm.md#operators): the tenants' DIDComm policies
(read, edit) and the grants with their recipient DIDs and queue depths (list, revoke). Same
authentication and model permissions as the rest of the operator API (apps/tenants/permissions.py);
validation errors are JSON objects mapping a field to its messages, with HTTP 400."""

from __future__ import annotations

from django.shortcuts import get_object_or_404
from drf_spectacular.utils import OpenApiParameter, extend_schema
from rest_framework import serializers, viewsets
from rest_framework.decorators import action
from rest_framework.request import Request
from rest_framework.response import Response

from apps.tenants.apibase import StrictModelSerializer, pk_or_404, service_call
from apps.tenants.models import Tenant
from apps.tenants.services import Actor
from apps.wire.display import utc_iso

from .mediation import mediation_revoke
from .models import DidcommPolicy, Mediation
from .policy import policy_for, policy_update
from .selectors import grants_with_depths, queued_for, recipient_depths

# Grant actions and the Django permission verb each needs on didcomm.Mediation.
GRANT_ACTIONS = {"list": "view", "retrieve": "view", "revoke": "change"}
# Policy actions and the verb each needs on didcomm.DidcommPolicy (the admin's policy pages alike).
POLICY_ACTIONS = {"list": "view", "retrieve": "view", "partial_update": "change"}


class DidcommPolicySerializer(StrictModelSerializer):
    """A tenant's DIDComm policy; bounds and choices are the model's (one rule with the admin)."""

    tenant: serializers.SlugRelatedField[Tenant] = serializers.SlugRelatedField(slug_field="slug", read_only=True)

    class Meta:
        model = DidcommPolicy
        fields = ["tenant", *DidcommPolicy.EDITABLE]


class PolicyViewSet(viewsets.GenericViewSet):
    """DIDComm policies by tenant slug: list (tenants that have used DIDComm), read (the defaults
    are created on first read, as on first use), edit (PATCH, audited as didcomm.update_policy)."""

    operator_actions = POLICY_ACTIONS
    queryset = DidcommPolicy.objects.select_related("tenant").order_by("tenant__slug")
    serializer_class = DidcommPolicySerializer
    lookup_field = "slug"
    lookup_value_regex = r"[-a-zA-Z0-9_]+"

    def _policy(self, slug: str) -> DidcommPolicy:
        return policy_for(tenant=get_object_or_404(Tenant, slug=slug))

    def list(self, request: Request) -> Response:
        page = self.paginate_queryset(self.get_queryset())
        return self.get_paginated_response(DidcommPolicySerializer(page, many=True).data)

    def retrieve(self, request: Request, slug: str) -> Response:
        return Response(DidcommPolicySerializer(self._policy(slug)).data)

    def partial_update(self, request: Request, slug: str) -> Response:
        policy = self._policy(slug)
        ser = DidcommPolicySerializer(policy, data=request.data, partial=True)
        ser.is_valid(raise_exception=True)
        actor = Actor(user=request.user, via="api")
        policy = service_call(policy_update, tenant=policy.tenant, actor=actor, **ser.validated_data)
        return Response(DidcommPolicySerializer(policy).data)


class GrantSerializer(serializers.Serializer):
    """A grant in a list: `recipients` is the number of its recipient DIDs."""

    id = serializers.IntegerField()
    tenant = serializers.CharField(help_text="the tenant's slug")
    client_did = serializers.CharField()
    state = serializers.ChoiceField(choices=Mediation.State.choices)
    created_at = serializers.DateTimeField()
    queued = serializers.IntegerField(help_text="messages queued for the client")
    recipients = serializers.IntegerField(help_text="its recipient DIDs")


class RecipientSerializer(serializers.Serializer):
    recipient_did = serializers.CharField()
    queued = serializers.IntegerField()
    added_at = serializers.DateTimeField()


class GrantDetailSerializer(GrantSerializer):
    """One grant: its recipient DIDs, each with its queue depth."""

    recipients = RecipientSerializer(many=True)  # type: ignore[assignment]


def _grant(m: Mediation, *, recipients: object) -> dict:
    """A grant as the API shows it; `recipients` is their count in a list, their DIDs and depths in one grant's view."""
    return {
        "id": m.pk,
        "tenant": m.tenant.slug,
        "client_did": m.client_did,
        "state": m.state,
        "created_at": utc_iso(m.created_at),
        "queued": queued_for(mediation=m),
        "recipients": recipients,
    }


class GrantViewSet(viewsets.GenericViewSet):
    """DIDComm mediation grants: list (optionally `?tenant=<slug>`), read, revoke."""

    operator_actions = GRANT_ACTIONS
    queryset = Mediation.objects.none()
    serializer_class = GrantDetailSerializer
    lookup_value_regex = r"[0-9]+"

    # The id in the path is an integer (the router's default pattern would pass "abc" to the view).
    _ID = OpenApiParameter("id", int, OpenApiParameter.PATH, description="the grant's id")

    def _mediation(self, pk: str) -> Mediation:
        return get_object_or_404(Mediation.objects.select_related("tenant"), pk=pk_or_404(Mediation, pk))

    @extend_schema(
        operation_id="didcomm_grants_list",
        summary="List DIDComm mediation grants",
        parameters=[OpenApiParameter("tenant", str, description="tenant slug")],
        responses=GrantSerializer(many=True),
    )
    def list(self, request: Request) -> Response:
        qs = grants_with_depths()
        if request.query_params.get("tenant"):
            qs = qs.filter(tenant__slug=request.query_params["tenant"])
        page = self.paginate_queryset(qs)
        assert page is not None  # REST_FRAMEWORK's DEFAULT_PAGINATION_CLASS paginates every list
        return self.get_paginated_response([_grant(m, recipients=m.n_recipients) for m in page])

    @extend_schema(
        summary="Read a DIDComm mediation grant with its recipient DIDs and queue depths",
        parameters=[_ID],
        responses=GrantDetailSerializer,
    )
    def retrieve(self, request: Request, pk: str) -> Response:
        m = self._mediation(pk)
        return Response(_grant(m, recipients=recipient_depths(mediation=m)))

    @extend_schema(
        summary="Revoke a DIDComm mediation grant", parameters=[_ID], request=None, responses=GrantDetailSerializer
    )
    @action(detail=True, methods=["post"])
    def revoke(self, request: Request, pk: str) -> Response:
        m = self._mediation(pk)
        m = mediation_revoke(mediation=m, actor=Actor(user=request.user, via="api"))
        return Response(_grant(m, recipients=recipient_depths(mediation=m)))
