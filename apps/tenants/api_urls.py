"""/api/v1/: the operator API, its OpenAPI schema and offline docs (Swagger UI and Redoc from the sidecar)."""

from django.urls import include, path
from drf_spectacular.views import SpectacularAPIView, SpectacularRedocView, SpectacularSwaggerSplitView
from rest_framework.authentication import SessionAuthentication, TokenAuthentication
from rest_framework.permissions import IsAdminUser
from rest_framework.routers import DefaultRouter

from .api import AuditEntryViewSet, TenantViewSet

router = DefaultRouter(trailing_slash=True)
router.include_root_view = False
router.register("tenants", TenantViewSet, basename="tenant")
router.register("audit", AuditEntryViewSet, basename="audit")

# The schema and docs are for staff too; in a browser the admin session is enough to read them.
docs = {"permission_classes": [IsAdminUser], "authentication_classes": [SessionAuthentication, TokenAuthentication]}

urlpatterns = [
    path("", include(router.urls)),
    path("schema/", SpectacularAPIView.as_view(**docs), name="api-schema"),
    # The split view serves Swagger UI's start-up script as a file (`?script`), not inline (CSP).
    path("docs/", SpectacularSwaggerSplitView.as_view(url_name="api-schema", **docs), name="api-docs"),
    path("redoc/", SpectacularRedocView.as_view(url_name="api-schema", **docs), name="api-redoc"),
]
