"""Usage fixtures: one warm Spark engine (a Spark Connect server) for the whole test run, shared by
every Spark test, the real job processes and the Celery workers they start; and a staff user."""

from __future__ import annotations

import os
import shutil
import socket

import pytest


def _java_ready() -> bool:
    return bool(shutil.which("java")) and os.path.exists("/usr/share/java/postgresql.jar")


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


@pytest.fixture(scope="session")
def spark_engine(tmp_path_factory):
    """One Spark Connect engine for the session on a free loopback port (JVM start ~15 s, once).
    SPARK_ENGINE_PORT is set in os.environ, so job processes and workers started later use it."""
    assert _java_ready(), "run scripts/ensure_extra_java.sh (make test does) to install Java and the JDBC drivers"
    from spark_reports import engine

    os.environ.pop("SPARK_REMOTE", None)
    os.environ.pop("SPARK_MASTER", None)
    # Tiny test data: a couple of shuffle and JDBC partitions instead of the job's defaults.
    os.environ.setdefault("SPARK_SHUFFLE_PARTITIONS", "2")
    os.environ.setdefault("SPARK_JDBC_PARTITIONS", "2")
    port = _free_port()
    os.environ["SPARK_ENGINE_PORT"] = str(port)
    var = tmp_path_factory.mktemp("spark-engine")
    # The tests' own deployment (its engine is never a `make run` engine of this checkout, nor the
    # reverse): job processes and workers started later inherit it.
    os.environ["MEDIATOR_VAR_DIR"] = str(var)
    pid = engine.start_background(var_dir=var, host="127.0.0.1", port=port)
    yield port
    os.kill(pid, 15)


@pytest.fixture(scope="session")
def spark(spark_engine):
    """A Connect client session of the shared engine, as a job process builds it."""
    from spark_reports.config import build_session

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


@pytest.fixture(autouse=True)
def lake_dir(tmp_path, monkeypatch, settings):
    """A metering lake of the test's own (the export and the report, in process and in job processes)."""
    path = str(tmp_path / "lake")
    monkeypatch.setenv("USAGE_LAKE_URI", path)
    settings.USAGE_LAKE_URI = path
    return path
