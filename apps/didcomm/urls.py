from django.urls import path

from . import views

urlpatterns = [
    path("didcomm", views.endpoint, name="didcomm"),
    path("didcomm/invitation", views.invitation, name="didcomm-invitation"),
]
