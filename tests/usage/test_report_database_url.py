"""The usage report's database from a libpq multi-host URL (the cluster's, docs/serving.md "Past
one box"): the result rows go to the primary, the JDBC scans to the primary or, with
REPORT_READ_FROM=standby, preferably to a replica."""

from __future__ import annotations

from django.db import connection

from apps.usage import services
from spark_reports.config import database_from_url

CLUSTER = "postgresql://mediator@10.0.0.1,10.0.0.2,10.0.0.3/mediator?target_session_attrs=read-write&connect_timeout=2"


def test_a_multi_host_url_writes_to_the_primary_and_scans_it(monkeypatch):
    monkeypatch.delenv("REPORT_READ_FROM", raising=False)
    db = database_from_url(CLUSTER)
    assert db.connect_kwargs == {
        "host": "10.0.0.1,10.0.0.2,10.0.0.3",
        "port": 5432,
        "dbname": "mediator",
        "user": "mediator",
        "target_session_attrs": "read-write",
        "connect_timeout": "2",
    }
    assert db.url == "jdbc:postgresql://10.0.0.1:5432,10.0.0.2:5432,10.0.0.3:5432/mediator"
    assert db.properties["targetServerType"] == "primary"


def test_reports_read_a_standby_when_asked_and_still_write_to_the_primary(monkeypatch):
    monkeypatch.setenv("REPORT_READ_FROM", "standby")
    db = database_from_url(CLUSTER)
    assert db.properties["targetServerType"] == "preferSecondary"
    assert db.connect_kwargs["target_session_attrs"] == "read-write"


def test_a_single_host_url_is_as_before(monkeypatch):
    monkeypatch.delenv("REPORT_READ_FROM", raising=False)
    db = database_from_url("postgresql://u:pw@db.example:6543/m")
    assert db.url == "jdbc:postgresql://db.example:6543/m"
    assert "targetServerType" not in db.properties
    assert db.connect_kwargs == {"host": "db.example", "port": 6543, "dbname": "m", "user": "u", "password": "pw"}


def test_the_launcher_passes_a_multi_host_database_on_with_its_target(monkeypatch):
    """The Celery task builds REPORT_DATABASE_URL from Django's settings: the options that pick the
    primary among several hosts go with it."""
    monkeypatch.setitem(connection.settings_dict, "HOST", "10.0.0.1,10.0.0.2")
    monkeypatch.setitem(connection.settings_dict, "PORT", "")
    monkeypatch.setitem(
        connection.settings_dict, "OPTIONS", {"target_session_attrs": "read-write", "connect_timeout": 2, "pool": {}}
    )
    url = services.report_database_url()
    assert (
        url.split("@", 1)[1]
        == f"10.0.0.1,10.0.0.2:5432/{connection.settings_dict['NAME']}?target_session_attrs=read-write&connect_timeout=2"
    )
    assert database_from_url(url).connect_kwargs["target_session_attrs"] == "read-write"


def test_the_embedded_socket_becomes_its_loopback_tcp_address_with_the_password(monkeypatch, settings):
    """PostgreSQL's JDBC driver reaches no Unix socket: the job gets the embedded server's TCP port."""
    monkeypatch.setattr(settings, "EMBEDDED_PGDATA", "/srv/mediator/var/pg", raising=False)
    monkeypatch.setattr(settings, "EMBEDDED_PG_TCP", {"host": "127.0.0.1", "port": 54321, "password": "p/w"})
    monkeypatch.setitem(connection.settings_dict, "HOST", "/srv/mediator/var/pg")
    monkeypatch.setitem(connection.settings_dict, "PORT", 54321)
    monkeypatch.setitem(connection.settings_dict, "USER", "postgres")
    url = services.report_database_url()
    assert url == f"postgresql://postgres:p%2Fw@127.0.0.1:54321/{connection.settings_dict['NAME']}"
    assert database_from_url(url).properties["password"] == "p/w"
