"""Operator API under /api/v1/push/ (docs/push.md#the-operator-api): a tenant's push providers
(list, read, add, change, remove; credentials are write-only, answered only as `has_credentials`),
its push policy (read, with the defaults when it has none; change) and its device counts per
service (never a token, a subject or a DID). Same authentication and model permissions as the rest
of the operator API (apps/tenants/permissions.py); every write goes through apps/push/services.py,
audited with via="api"; validation errors are the API's 400 JSON (a kind the tenant already has: 409).
Every query names the tenant of the path."""

from __future__ import annotations

from django.conf import settings
from django.shortcuts import get_object_or_404
from drf_spectacular.utils import OpenApiParameter, extend_schema, inline_serializer
from rest_framework import serializers, status, viewsets
from rest_framework.exceptions import ValidationError
from rest_framework.request import Request
from rest_framework.response import Response

from apps.tenants import apibase
from apps.tenants.apibase import StrictSerializer, service_call
from apps.tenants.models import Tenant
from apps.tenants.services import Actor
from apps.wire.display import utc_iso

from . import services
from .models import Device, PushPolicy, PushProvider, Service
from .selectors import device_counts

# Each table maps a viewset action to the Django permission verb it needs on its model (the
# admin's push section checks the same model permissions).
PROVIDER_ACTIONS = {
    "list": "view",
    "retrieve": "view",
    "create": "add",
    "partial_update": "change",
    "destroy": "delete",
}
POLICY_ACTIONS = {"retrieve": "view", "partial_update": "change"}
DEVICE_ACTIONS = {"retrieve": "view"}

_SLUG_REGEX = r"[-a-zA-Z0-9_]+"
_SLUG = OpenApiParameter("slug", str, OpenApiParameter.PATH, description="the tenant's slug")
_KIND = OpenApiParameter(
    "kind", str, OpenApiParameter.PATH, enum=PushProvider.Kind.values, description="the provider's kind"
)


def _actor(request: Request) -> Actor:
    return Actor(user=request.user, via="api")


def _tenant(slug: str) -> Tenant:
    return get_object_or_404(Tenant, slug=slug)


# --- providers ----------------------------------------------------------------------------------


class PushProviderSerializer(serializers.Serializer):
    """A tenant's provider as the API shows it: never its credentials, only whether it has them."""

    tenant = serializers.CharField(help_text="the tenant's slug")
    kind = serializers.ChoiceField(choices=PushProvider.Kind.choices)
    enabled = serializers.BooleanField()
    settings = serializers.DictField(help_text="what is not secret (docs/push.md#providers)")
    has_credentials = serializers.BooleanField(help_text="credentials are sealed; they are never shown")
    state = serializers.ChoiceField(choices=PushProvider.State.choices)
    last_error = serializers.CharField(help_text="`outcome: reason`, or empty")
    last_success_at = serializers.DateTimeField(allow_null=True)
    last_failure_at = serializers.DateTimeField(allow_null=True)
    updated_at = serializers.DateTimeField()

    def to_representation(self, provider: PushProvider) -> dict:
        return {
            "tenant": provider.tenant.slug,
            "kind": provider.kind,
            "enabled": provider.enabled,
            "settings": provider.settings,
            "has_credentials": provider.has_credentials,
            "state": provider.state,
            "last_error": provider.last_error,
            "last_success_at": utc_iso(provider.last_success_at) if provider.last_success_at else None,
            "last_failure_at": utc_iso(provider.last_failure_at) if provider.last_failure_at else None,
            "updated_at": utc_iso(provider.updated_at),
        }


def _credentials(**kwargs) -> serializers.DictField:
    return serializers.DictField(
        write_only=True,
        help_text="write-only, sealed at rest, checked with the provider's own check (docs/push.md#providers)",
        **kwargs,
    )


class PushProviderCreateSerializer(StrictSerializer):
    """A new provider of the tenant: its kind (one of each per tenant), settings and credentials."""

    kind = apibase.ChoiceField(choices=PushProvider.Kind.choices)
    enabled = apibase.BooleanField(default=True)
    settings = serializers.DictField(required=False, help_text="what is not secret (docs/push.md#providers)")
    credentials = _credentials()


class PushProviderUpdateSerializer(StrictSerializer):
    """What may change on a provider; its kind may not (its sealed credentials are bound to it)."""

    fixed = {
        "kind": "The kind cannot be changed: add a provider of the other kind and remove this one.",
        "tenant": "The tenant cannot be changed.",
    }
    enabled = apibase.BooleanField(required=False)
    settings = serializers.DictField(required=False, help_text="replaces the settings as a whole")
    credentials = _credentials(required=False)


def _save(provider: PushProvider, request: Request, **fields) -> PushProvider:
    """Save through the service; a check the provider refuses is a 400, a kind taken a 409."""
    try:
        return service_call(services.provider_save, provider=provider, actor=_actor(request), **fields)
    except services.ProviderInvalid as exc:
        raise ValidationError({"non_field_errors": [f"{provider.get_kind_display()}: {exc}"]}) from None


class PushProviderViewSet(viewsets.GenericViewSet):
    """A tenant's push providers: list, add (POST), read, change (PATCH; credentials left out stay
    sealed as they are), remove (DELETE; the devices stay registered)."""

    operator_actions = PROVIDER_ACTIONS
    queryset = PushProvider.objects.none()
    serializer_class = PushProviderSerializer
    lookup_field = "kind"
    lookup_value_regex = r"[a-z0-9_-]+"

    def _provider(self, slug: str, kind: str) -> PushProvider:
        tenant = _tenant(slug)
        return get_object_or_404(PushProvider.objects.select_related("tenant"), tenant=tenant, kind=kind)

    @extend_schema(
        operation_id="push_providers_list",
        summary="List a tenant's push providers",
        parameters=[_SLUG],
        responses=PushProviderSerializer(many=True),
    )
    def list(self, request: Request, slug: str) -> Response:
        tenant = _tenant(slug)
        page = self.paginate_queryset(
            PushProvider.objects.filter(tenant=tenant).select_related("tenant").order_by("kind")
        )
        assert page is not None  # REST_FRAMEWORK's DEFAULT_PAGINATION_CLASS paginates every list
        return self.get_paginated_response(PushProviderSerializer(page, many=True).data)

    @extend_schema(
        summary="Add a push provider to a tenant",
        parameters=[_SLUG],
        request=PushProviderCreateSerializer,
        responses={201: PushProviderSerializer},
    )
    def create(self, request: Request, slug: str) -> Response:
        tenant = _tenant(slug)
        ser = PushProviderCreateSerializer(data=request.data)
        ser.is_valid(raise_exception=True)
        data = ser.validated_data
        provider = PushProvider(tenant=tenant, kind=data["kind"])
        provider = _save(
            provider,
            request,
            enabled=data["enabled"],
            settings_=data.get("settings", {}),
            credentials=data["credentials"],
        )
        return Response(PushProviderSerializer(provider).data, status=status.HTTP_201_CREATED)

    @extend_schema(summary="Read a tenant's push provider", parameters=[_SLUG, _KIND], responses=PushProviderSerializer)
    def retrieve(self, request: Request, slug: str, kind: str) -> Response:
        return Response(PushProviderSerializer(self._provider(slug, kind)).data)

    @extend_schema(
        summary="Change a tenant's push provider",
        parameters=[_SLUG, _KIND],
        request=PushProviderUpdateSerializer,
        responses=PushProviderSerializer,
    )
    def partial_update(self, request: Request, slug: str, kind: str) -> Response:
        provider = self._provider(slug, kind)
        ser = PushProviderUpdateSerializer(data=request.data)
        ser.is_valid(raise_exception=True)
        data = ser.validated_data
        provider = _save(
            provider,
            request,
            enabled=data.get("enabled", provider.enabled),
            settings_=data.get("settings", provider.settings),
            credentials=data.get("credentials"),
        )
        return Response(PushProviderSerializer(provider).data)

    @extend_schema(
        summary="Remove a tenant's push provider", parameters=[_SLUG, _KIND], request=None, responses={204: None}
    )
    def destroy(self, request: Request, slug: str, kind: str) -> Response:
        services.provider_delete(provider=self._provider(slug, kind), actor=_actor(request))
        return Response(status=status.HTTP_204_NO_CONTENT)


# --- the policy ---------------------------------------------------------------------------------

_INTERVAL_HELP = (
    "a sleeping client is woken at most once per this many seconds (and once between two pickups); "
    "null: the deployment's PUSH_WAKE_INTERVAL_S"
)


def _key(help_text: str) -> apibase.PatternField:
    return apibase.PatternField(
        pattern=services.KEY_PATTERN,
        message=lambda value: services.KEY_MESSAGE,
        max_length=64,
        allow_blank=True,
        required=False,
        help_text=f"{help_text}; empty: none",
    )


class PushPolicySerializer(serializers.Serializer):
    """A tenant's push policy (the defaults when it has none: a silent wake at the deployment's interval)."""

    tenant = serializers.CharField(help_text="the tenant's slug")
    wake_interval_s = serializers.IntegerField(allow_null=True, help_text=_INTERVAL_HELP)
    effective_wake_interval_s = serializers.IntegerField(help_text="the interval in force")
    visible = serializers.BooleanField(help_text="false: a silent wake that says nothing (docs/push.md#privacy)")
    title_loc_key = serializers.CharField()
    body_loc_key = serializers.CharField()
    collapse_id = serializers.CharField()

    def to_representation(self, policy: PushPolicy) -> dict:
        interval = policy.wake_interval_s
        return {
            "tenant": policy.tenant.slug,
            "wake_interval_s": interval,
            "effective_wake_interval_s": settings.PUSH_WAKE_INTERVAL_S if interval is None else interval,
            **{name: getattr(policy, name) for name in services.POLICY_FIELDS if name != "wake_interval_s"},
        }


class PushPolicyUpdateSerializer(StrictSerializer):
    """What may change on a tenant's push policy; a visible alert needs the body's key (stored or sent)."""

    wake_interval_s = apibase.IntegerField(
        min_value=0, max_value=services.WAKE_INTERVAL_MAX_S, allow_null=True, required=False, help_text=_INTERVAL_HELP
    )
    visible = apibase.BooleanField(required=False, help_text="an alert from the app's own strings, not a silent wake")
    title_loc_key = _key("the app's string for the alert's title")
    body_loc_key = _key("the app's string for the alert's text (required for a visible alert)")
    collapse_id = _key("a newer alert replaces an older one with the same id")


class PushPolicyViewSet(viewsets.GenericViewSet):
    """A tenant's push policy by its slug: read (the defaults when none is stored; reading creates
    no row), change (PATCH, audited as push.update_policy)."""

    operator_actions = POLICY_ACTIONS
    queryset = PushPolicy.objects.none()
    serializer_class = PushPolicySerializer
    lookup_field = "slug"
    lookup_value_regex = _SLUG_REGEX

    @extend_schema(summary="Read a tenant's push policy", parameters=[_SLUG], responses=PushPolicySerializer)
    def retrieve(self, request: Request, slug: str) -> Response:
        return Response(PushPolicySerializer(services.policy_of(tenant=_tenant(slug))).data)

    @extend_schema(
        summary="Change a tenant's push policy",
        parameters=[_SLUG],
        request=PushPolicyUpdateSerializer,
        responses=PushPolicySerializer,
    )
    def partial_update(self, request: Request, slug: str) -> Response:
        tenant = _tenant(slug)
        ser = PushPolicyUpdateSerializer(data=request.data)
        ser.is_valid(raise_exception=True)
        policy = service_call(services.policy_update, tenant=tenant, actor=_actor(request), **ser.validated_data)
        return Response(PushPolicySerializer(policy).data)


# --- devices ------------------------------------------------------------------------------------

DeviceCountsSerializer = inline_serializer(
    "PushDeviceCounts",
    {
        "tenant": serializers.CharField(help_text="the tenant's slug"),
        "total": serializers.IntegerField(),
        "services": inline_serializer(
            "PushDeviceCountsByService", {service: serializers.IntegerField() for service in Service.values}
        ),
    },
)


class PushDeviceViewSet(viewsets.GenericViewSet):
    """How many devices a tenant has registered, per push service: counts only (no token, no
    subject, no DID)."""

    operator_actions = DEVICE_ACTIONS
    queryset = Device.objects.none()
    lookup_field = "slug"
    lookup_value_regex = _SLUG_REGEX

    @extend_schema(
        summary="Count a tenant's registered push devices per service",
        parameters=[_SLUG],
        responses=DeviceCountsSerializer,
    )
    def retrieve(self, request: Request, slug: str) -> Response:
        tenant = _tenant(slug)
        counts = device_counts(tenant=tenant)
        return Response({"tenant": tenant.slug, "total": sum(counts.values()), "services": counts})
