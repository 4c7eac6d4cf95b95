"""URL map: protocol endpoints at the root, the operator console under /admin/."""

from django.contrib import admin
from django.urls import include, path

urlpatterns = [
    path("admin/", admin.site.urls),
    path("api/v1/", include("apps.tenants.api_urls")),
    path("", include("apps.protocol.urls")),
]
