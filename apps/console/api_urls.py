"""/api/v1/: the operator API, its OpenAPI schema and offline docs (Swagger UI and Redoc from the sidecar)."""

from django.urls import include, path
from drf_spectacular.views import SpectacularAPIView, SpectacularRedocView, SpectacularSwaggerSplitView
from rest_framework.authentication import SessionAuthentication
from rest_framework.renderers import JSONRenderer
from rest_framework.routers import DefaultRouter

from apps.tenants.auth import ApiTokenAuthentication

from .api import AuditEntryViewSet, SchemaPermission, TenantViewSet

router = DefaultRouter(trailing_slash=True)
router.include_root_view = False
router.register("tenants", TenantViewSet, basename="tenant")
router.register("audit", AuditEntryViewSet, basename="audit")

# The schema is for operators who may read something through the API (SchemaPermission), by token
# or the admin session; the docs pages are for a browser, by the session only (a token header a page
# cannot use would otherwise be authenticated while the error page renders, a 500), and only GET
# them (OPTIONS has no page template: another 500).
schema = {
    "permission_classes": [SchemaPermission],
    # The token first, as everywhere in the API: no or bad credentials are a 401 that says so.
    "authentication_classes": [ApiTokenAuthentication, SessionAuthentication],
}
pages = {
    "permission_classes": [SchemaPermission],
    "authentication_classes": [SessionAuthentication],
    "http_method_names": ["get", "head"],
}


class SchemaView(SpectacularAPIView):
    """The schema; its refusals (401, 403) in the API's JSON, not in the schema's YAML."""

    def handle_exception(self, exc):
        response = super().handle_exception(exc)
        self.request.accepted_renderer, self.request.accepted_media_type = JSONRenderer(), "application/json"
        return response


urlpatterns = [
    path("", include(router.urls)),
    path("schema/", SchemaView.as_view(**schema), name="api-schema"),
    # The split view serves Swagger UI's start-up script as a file (`?script`), not inline (CSP).
    path("docs/", SpectacularSwaggerSplitView.as_view(url_name="api-schema", **pages), name="api-docs"),
    path("redoc/", SpectacularRedocView.as_view(url_name="api-schema", **pages), name="api-redoc"),
]
