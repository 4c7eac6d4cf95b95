"""Operator API for usage reports under /api/v1/usage/: trigger, list, retrieve, download."""

from __future__ import annotations

from django.shortcuts import get_object_or_404
from drf_spectacular.types import OpenApiTypes
from drf_spectacular.utils import OpenApiParameter, OpenApiResponse, extend_schema
from rest_framework import generics, status
from rest_framework.request import Request
from rest_framework.response import Response

from apps.tenants.apibase import pk_or_404

from . import selectors, services
from .models import ReportRun
from .permissions import REPORT_RUN_ACTIONS
from .serializers import ReportDailySerializer, ReportRequestSerializer, ReportRunDetailSerializer, ReportRunSerializer
from .views import csv_response


class ReportRunListCreate(generics.ListAPIView):
    """GET: runs, newest first. POST {date_from, date_to, tenants: [slug]}: queue a run (202)."""

    serializer_class = ReportRunSerializer
    queryset = ReportRun.objects.prefetch_related("tenants").order_by("-id")
    operator_actions = {"GET": REPORT_RUN_ACTIONS["list"], "POST": REPORT_RUN_ACTIONS["request"]}

    @extend_schema(request=ReportRequestSerializer, responses={202: ReportRunSerializer})
    def post(self, request: Request) -> Response:
        data = ReportRequestSerializer(data=request.data)
        data.is_valid(raise_exception=True)
        run = services.report_run_request(
            date_from=data.validated_data["date_from"],
            date_to=data.validated_data["date_to"],
            tenants=data.validated_data["tenants"],
            kind=ReportRun.Kind.API,
            requested_by=request.user,
        )
        return Response(ReportRunSerializer(run).data, status=status.HTTP_202_ACCEPTED)


class ReportRunDetail(generics.GenericAPIView):
    """GET: one run; once succeeded, with its per-tenant daily rows."""

    queryset = ReportRun.objects.all()
    serializer_class = ReportRunDetailSerializer
    operator_actions = {"GET": REPORT_RUN_ACTIONS["retrieve"]}

    def get(self, request: Request, pk: int) -> Response:
        run = get_object_or_404(ReportRun.objects.prefetch_related("tenants"), pk=pk_or_404(ReportRun, pk))
        body = ReportRunSerializer(run).data
        if run.status == ReportRun.Status.SUCCEEDED:
            rows = run.daily.select_related("tenant").order_by("day", "tenant__slug")
            body["daily"] = ReportDailySerializer(rows, many=True).data
        return Response(body)


class ReportRunCsv(generics.GenericAPIView):
    """GET ?table=daily|by_type|by_code|top: a succeeded run's table as CSV (404 before it succeeded)."""

    queryset = ReportRun.objects.all()
    operator_actions = {"GET": REPORT_RUN_ACTIONS["csv"]}

    @extend_schema(
        parameters=[OpenApiParameter("table", str, enum=list(selectors.CSV_TABLES), default="daily")],
        responses={
            (200, "text/csv"): OpenApiResponse(OpenApiTypes.STR, description="the table as CSV, a header row first")
        },
    )
    def get(self, request: Request, pk: int):
        run = get_object_or_404(ReportRun, pk=pk_or_404(ReportRun, pk))
        return csv_response(run, request.query_params.get("table", "daily"))
