"""API tokens stored as digests: every DRF authtoken key becomes an ApiToken holding its SHA-256
digest and first characters (the same key keeps working), then the plaintext table is dropped."""

import hashlib

import django.db.models.deletion
import django.utils.timezone
from django.conf import settings
from django.db import migrations, models

PLAINTEXT_TABLE = "authtoken_token"


def hash_existing_keys(apps, schema_editor):
    connection = schema_editor.connection
    if PLAINTEXT_TABLE not in connection.introspection.table_names():
        return
    ApiToken = apps.get_model("tenants", "ApiToken")
    with connection.cursor() as cursor:
        cursor.execute(f"SELECT key, user_id, created FROM {PLAINTEXT_TABLE}")
        rows = cursor.fetchall()
    ApiToken.objects.bulk_create(
        ApiToken(user_id=user_id, prefix=key[:8], digest=hashlib.sha256(key.encode()).hexdigest(), created_at=created)
        for key, user_id, created in rows
    )
    # The keys are gone from the database with the table (DRF's app is no longer installed).
    schema_editor.execute(f"DROP TABLE {PLAINTEXT_TABLE}")


class Migration(migrations.Migration):
    dependencies = [
        ("tenants", "0004_ip_rate_burst"),
        migrations.swappable_dependency(settings.AUTH_USER_MODEL),
    ]

    operations = [
        migrations.CreateModel(
            name="ApiToken",
            fields=[
                ("id", models.BigAutoField(auto_created=True, primary_key=True, serialize=False, verbose_name="ID")),
                ("prefix", models.CharField(editable=False, max_length=8, verbose_name="key starts with")),
                ("digest", models.CharField(editable=False, max_length=64, unique=True)),
                (
                    "created_at",
                    models.DateTimeField(default=django.utils.timezone.now, editable=False, verbose_name="created"),
                ),
                (
                    "user",
                    models.ForeignKey(
                        on_delete=django.db.models.deletion.CASCADE,
                        related_name="api_tokens",
                        to=settings.AUTH_USER_MODEL,
                    ),
                ),
            ],
            options={"verbose_name": "API token", "verbose_name_plural": "API tokens", "ordering": ["-created_at", "-id"]},
        ),
        migrations.RunPython(hash_existing_keys, migrations.RunPython.noop),
    ]
