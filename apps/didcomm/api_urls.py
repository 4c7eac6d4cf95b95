"""/api/v1/didcomm/: the DIDComm part of the operator API."""

from django.urls import include, path
from rest_framework.routers import DefaultRouter

from .api import GrantViewSet, PolicyViewSet

router = DefaultRouter(trailing_slash=True)
router.include_root_view = False
router.register("grants", GrantViewSet, basename="didcomm-grant")
router.register("policies", PolicyViewSet, basename="didcomm-policy")

urlpatterns = [path("", include(router.urls))]
