"""/api/v1/usage/ routes (included from mediator_project/urls.py)."""

from django.urls import path

from . import api

urlpatterns = [
    path("reports/", api.ReportRunListCreate.as_view(), name="usage-api-reports"),
    path("reports/<int:pk>/", api.ReportRunDetail.as_view(), name="usage-api-report"),
    path("reports/<int:pk>/csv", api.ReportRunCsv.as_view(), name="usage-api-report-csv"),
]
