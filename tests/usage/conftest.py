"""Usage fixtures: one Spark session for the whole test run (startup costs ~10 s), and a staff user."""

from __future__ import annotations

import os
import shutil

import pytest


def _java_ready() -> bool:
    return bool(shutil.which("java")) and os.path.exists("/usr/share/java/postgresql.jar")


@pytest.fixture(scope="session")
def spark():
    """The local SparkSession shared by every Spark test (scripts/ensure_extra_java.sh provides Java + JDBC)."""
    assert _java_ready(), "run scripts/ensure_extra_java.sh (make test does) to install Java and the JDBC drivers"
    from spark_reports.config import build_session

    # Tiny test data: a couple of shuffle partitions instead of the job's default.
    os.environ.setdefault("SPARK_SHUFFLE_PARTITIONS", "2")
    os.environ.setdefault("SPARK_JDBC_PARTITIONS", "2")

    session = build_session("mediator-usage-tests")
    yield session
    session.stop()


@pytest.fixture
def staff_user(django_user_model):
    """A staff member who may view report runs and metering, and request runs (add_reportrun)."""
    from django.contrib.auth.models import Permission
    from django.db.models import Q

    user = django_user_model.objects.create_user("staff", "staff@example.test", "staff-pass-123", is_staff=True)
    user.user_permissions.set(
        Permission.objects.filter(
            Q(codename__startswith="view_") | Q(codename="add_reportrun"), content_type__app_label="usage"
        )
    )
    return user
