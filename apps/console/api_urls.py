"""/api/v1/: the operator API, its OpenAPI schema and offline docs (Swagger UI and Redoc from the sidecar)."""

from django.urls import include, path
from drf_spectacular.views import SpectacularAPIView, SpectacularRedocView, SpectacularSwaggerSplitView
from rest_framework.authentication import SessionAuthentication
from rest_framework.permissions import IsAdminUser
from rest_framework.routers import DefaultRouter

from apps.tenants.auth import ApiTokenAuthentication

from .api import AuditEntryViewSet, TenantViewSet

router = DefaultRouter(trailing_slash=True)
router.include_root_view = False
router.register("tenants", TenantViewSet, basename="tenant")
router.register("audit", AuditEntryViewSet, basename="audit")

# The schema is for staff, by token or the admin session; the docs pages are for a browser, by the
# session only (a token header a page cannot use would otherwise be authenticated while the error
# page renders, a 500), and only GET them (OPTIONS has no page template: another 500).
schema = {
    "permission_classes": [IsAdminUser],
    "authentication_classes": [SessionAuthentication, ApiTokenAuthentication],
}
pages = {
    "permission_classes": [IsAdminUser],
    "authentication_classes": [SessionAuthentication],
    "http_method_names": ["get", "head"],
}

urlpatterns = [
    path("", include(router.urls)),
    path("schema/", SpectacularAPIView.as_view(**schema), name="api-schema"),
    # The split view serves Swagger UI's start-up script as a file (`?script`), not inline (CSP).
    path("docs/", SpectacularSwaggerSplitView.as_view(url_name="api-schema", **pages), name="api-docs"),
    path("redoc/", SpectacularRedocView.as_view(url_name="api-schema", **pages), name="api-redoc"),
]
