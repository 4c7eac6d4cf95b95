"""URL map: protocol endpoints at the root, the operator console under /admin/."""

from django.contrib import admin
from django.urls import include, path

urlpatterns = [
    path("admin/", admin.site.urls),
    path("", include("apps.protocol.urls")),
]
