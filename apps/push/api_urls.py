"""/api/v1/push/: the push part of the operator API (apps/push/api.py)."""

from django.urls import include, path
from rest_framework.routers import DefaultRouter

from .api import PushDeviceViewSet, PushPolicyViewSet, PushProviderViewSet

router = DefaultRouter(trailing_slash=True)
router.include_root_view = False
# A tenant's providers: providers/<slug>/ (list, add) and providers/<slug>/<kind>/ (read, change, remove).
router.register(r"providers/(?P<slug>[-a-zA-Z0-9_]+)", PushProviderViewSet, basename="push-provider")
router.register("policies", PushPolicyViewSet, basename="push-policy")
router.register("devices", PushDeviceViewSet, basename="push-device")

urlpatterns = [path("", include(router.urls))]
