"""Operator API tokens are stored as digests: a key shows once, when it is issued (console or
`operator_token`), every list shows only its first characters, it still authenticates, and the
keys of DRF's plaintext table keep working after the migration that hashes them."""

from __future__ import annotations

import re

import pytest
from django.db import connection
from django.db.migrations.executor import MigrationExecutor
from django.utils import timezone
from rest_framework.test import APIClient

from apps.tenants.models import ApiToken
from apps.tenants.services import api_token_issue


def _authenticates(key: str) -> bool:
    api = APIClient()
    api.credentials(HTTP_AUTHORIZATION=f"Token {key}")
    status = api.get("/api/v1/tenants/").status_code
    assert status in (200, 401), status
    return status == 200


@pytest.mark.django_db
def test_a_token_added_in_the_console_shows_its_key_once_and_only_its_prefix_after(staff_client, operator):
    resp = staff_client.post("/admin/tenants/apitoken/add/", {"user": operator.pk})
    assert resp.status_code == 200 and "no-store" in resp["Cache-Control"]
    key = re.search(r'id="issued-key"[^>]*value="([0-9a-f]{40})"', resp.content.decode()).group(1)
    assert _authenticates(key)
    token = ApiToken.objects.get()
    assert token.prefix == key[:8] and key not in (token.digest, token.prefix)
    pages = [
        "/admin/tenants/apitoken/",
        f"/admin/tenants/apitoken/{token.pk}/change/",
        f"/admin/tenants/apitoken/{token.pk}/history/",
        "/admin/",
        "/api/v1/schema/",
    ]
    for path in pages:
        page = staff_client.get(path)
        assert page.status_code == 200, path
        assert key not in page.content.decode(), path
    assert f"{key[:8]}…" in staff_client.get("/admin/tenants/apitoken/").content.decode()


@pytest.mark.django_db
def test_no_column_of_the_database_holds_a_key(operator):
    key = api_token_issue(user=operator).key
    with connection.cursor() as cursor:
        cursor.execute("SELECT * FROM tenants_apitoken")
        rows = cursor.fetchall()
    assert rows and not any(key in str(value) for row in rows for value in row)
    assert "authtoken_token" not in connection.introspection.table_names()


@pytest.mark.django_db
def test_a_wrong_key_or_an_inactive_user_does_not_authenticate(operator):
    key = api_token_issue(user=operator).key
    assert _authenticates(key) and not _authenticates(key[:-1] + ("0" if key[-1] != "0" else "1"))
    operator.is_active = False
    operator.save()
    assert not _authenticates(key)


@pytest.mark.django_db(transaction=True)
def test_a_plaintext_key_from_before_the_migration_keeps_working_and_leaves_the_database(django_user_model):
    before, after = [("tenants", "0004_ip_rate_burst")], [("tenants", "0005_api_tokens")]
    executor = MigrationExecutor(connection)
    executor.migrate(before)
    user = django_user_model.objects.create_superuser("olivia", "olivia@ops.test", "correct-horse-battery")
    key = "0123456789abcdef0123456789abcdef01234567"
    with connection.cursor() as cursor:  # DRF authtoken's table, as it was
        cursor.execute(
            "CREATE TABLE authtoken_token (key varchar(40) PRIMARY KEY, created timestamp with time zone NOT NULL, "
            "user_id integer NOT NULL UNIQUE)"
        )
        cursor.execute("INSERT INTO authtoken_token VALUES (%s, %s, %s)", [key, timezone.now(), user.pk])
    executor = MigrationExecutor(connection)
    executor.loader.build_graph()
    executor.migrate(after)
    executor = MigrationExecutor(connection)
    executor.migrate(executor.loader.graph.leaf_nodes())
    assert "authtoken_token" not in connection.introspection.table_names()
    token = ApiToken.objects.get(user=user)
    assert token.prefix == "01234567" and token.digest == ApiToken.digest_of(key)
    assert _authenticates(key)
