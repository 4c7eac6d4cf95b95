"""URL map: protocol endpoints at the root, the operator console under /admin/."""

from django.contrib import admin
from django.templatetags.static import static
from django.urls import include, path
from django.views.generic import RedirectView

from apps.ops import views as ops_views

urlpatterns = [
    path("admin/", admin.site.urls),
    path("metrics", ops_views.metrics, name="metrics"),
    # Browsers ask every host for /favicon.ico: the console's icon, never a 404.
    path("favicon.ico", RedirectView.as_view(url=static("console/favicon.svg"), permanent=False)),
    path("dashboard/", include("apps.usage.urls")),
    path("api/v1/usage/", include("apps.usage.api_urls")),
    path("api/v1/didcomm/", include("apps.didcomm.api_urls")),
    path("api/v1/push/", include("apps.push.api_urls")),
    path("api/v1/", include("apps.console.api_urls")),
    path("", include("apps.didcomm.urls")),
    path("", include("apps.decentrl.urls")),
]

handler400 = "mediator_project.errors.bad_request"
handler403 = "mediator_project.errors.permission_denied"
handler404 = "mediator_project.errors.not_found"
handler500 = "mediator_project.errors.server_error"
