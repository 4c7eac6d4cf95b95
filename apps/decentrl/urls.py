from django.urls import path

from . import views

urlpatterns = [
    path("", views.root, name="root"),
    path(".well-known/did.json", views.did_document, name="did-json"),
    path("health", views.health, name="health"),
    path("public/<path:did>", views.public_events, name="public-events"),
]
