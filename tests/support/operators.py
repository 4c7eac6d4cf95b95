"""Operator fixtures (a pytest plugin of tests/conftest.py, for the console's, the tenants' and the apps' operator
pages): a staff operator (superuser), a plain user, logged-in admin clients, API clients."""

from __future__ import annotations

import pytest
from django.test import Client
from rest_framework.test import APIClient

from apps.tenants.services import Actor, api_token_issue


@pytest.fixture
def operator(db, django_user_model):
    return django_user_model.objects.create_superuser("olivia", "olivia@ops.test", "correct-horse-battery")


@pytest.fixture
def plain_user(db, django_user_model):
    return django_user_model.objects.create_user("mallory", "mallory@example.test", "not-staff-pw")


@pytest.fixture
def actor(operator) -> Actor:
    return Actor(user=operator, via="cli")


@pytest.fixture
def staff_client(operator) -> Client:
    client = Client()
    client.force_login(operator)
    return client


@pytest.fixture
def api(operator) -> APIClient:
    client = APIClient()
    client.credentials(HTTP_AUTHORIZATION=f"Token {api_token_issue(user=operator).key}")
    return client


@pytest.fixture
def plain_api(plain_user) -> APIClient:
    client = APIClient()
    client.credentials(HTTP_AUTHORIZATION=f"Token {api_token_issue(user=plain_user).key}")
    return client


def push_section_form(*providers: dict, policy: dict | None = None, initial_providers: int = 0) -> dict:
    """The push section of a tenant's change form as a browser posts it (apps/push/admin.py's
    inlines): each provider's fields, and the push policy's (none: left as it is)."""
    data = {
        "push_providers-TOTAL_FORMS": str(len(providers)),
        "push_providers-INITIAL_FORMS": str(initial_providers),
        "push_policy-TOTAL_FORMS": "1" if policy is not None else "0",
        "push_policy-INITIAL_FORMS": "0",
    }
    for i, fields in enumerate(providers):
        data.update({f"push_providers-{i}-{k}": v for k, v in fields.items()})
    for k, v in (policy or {}).items():
        data[f"push_policy-0-{k}"] = v
    return data
