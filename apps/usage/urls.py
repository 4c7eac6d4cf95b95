"""Staff pages under /dashboard/ (included from mediator_project/urls.py)."""

from django.urls import path

from . import views

app_name = "usage"
urlpatterns = [
    path("", views.dashboard, name="dashboard"),
    path("reports/", views.run_list, name="run-list"),
    path("reports/<int:pk>/", views.run_detail, name="run-detail"),
    path("refresh", views.dashboard_refresh, name="dashboard-refresh"),
    path("reports/<int:pk>/status", views.run_status, name="run-status"),
    path("reports/<int:pk>/cancel", views.run_cancel, name="run-cancel"),
    path("reports/<int:pk>/csv", views.run_csv, name="run-csv"),
]
