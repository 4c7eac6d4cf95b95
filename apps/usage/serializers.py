"""Operator API shapes for report runs."""

from __future__ import annotations

from django.conf import settings
from rest_framework import serializers

from apps.tenants import apibase
from apps.tenants.models import Tenant

from .models import ReportDaily, ReportRun


class ReportRequestSerializer(apibase.StrictSerializer):
    """A report over date_from..date_to (UTC days, inclusive; at most USAGE_REPORT_MAX_DAYS days),
    for the tenants named by slug (none: every tenant)."""

    date_from = apibase.DateField()
    date_to = apibase.DateField()
    tenants = serializers.ListField(
        child=apibase.SlugField(max_length=64), required=False, max_length=1000, default=list
    )

    def validate(self, attrs):
        if attrs["date_to"] < attrs["date_from"]:
            raise serializers.ValidationError("date_to is before date_from")
        if (attrs["date_to"] - attrs["date_from"]).days + 1 > settings.USAGE_REPORT_MAX_DAYS:
            raise serializers.ValidationError(f"a report covers at most {settings.USAGE_REPORT_MAX_DAYS} days")
        slugs = set(attrs["tenants"])
        found = list(Tenant.objects.filter(slug__in=slugs))
        if len(found) != len(slugs):
            missing = sorted(slugs - {t.slug for t in found})
            raise serializers.ValidationError({"tenants": [f"unknown tenant: {s}" for s in missing]})
        attrs["tenants"] = found
        return attrs


class ReportRunSerializer(serializers.ModelSerializer):
    id = serializers.IntegerField(read_only=True)
    tenants: serializers.SlugRelatedField[Tenant] = serializers.SlugRelatedField(
        slug_field="slug", many=True, read_only=True
    )
    duration_s = serializers.FloatField(read_only=True, allow_null=True)

    class Meta:
        model = ReportRun
        fields = [
            "id",
            "kind",
            "status",
            "date_from",
            "date_to",
            "tenants",
            "created_at",
            "started_at",
            "finished_at",
            "duration_s",
            "row_counts",
            "stages",
            "log_tail",
        ]
        read_only_fields = fields


class ReportDailySerializer(serializers.ModelSerializer):
    tenant: serializers.SlugRelatedField[Tenant] = serializers.SlugRelatedField(slug_field="slug", read_only=True)

    class Meta:
        model = ReportDaily
        exclude = ["id", "run"]


class ReportRunDetailSerializer(ReportRunSerializer):
    """One run; `daily` only once it succeeded (ReportRunDetail adds it)."""

    # Not read-only, so that the schema does not list it as always present; the view never reads input.
    daily = ReportDailySerializer(many=True, required=False)

    class Meta(ReportRunSerializer.Meta):
        fields = [*ReportRunSerializer.Meta.fields, "daily"]
        read_only_fields = ReportRunSerializer.Meta.fields
