"""The usage report under `make run`: the embedded PostgreSQL (scripts/with_postgres.py) serves Django on
its Unix socket and the report's JDBC reads on a loopback TCP port of its own, where a connection needs
the password kept in var/ (scram-sha-256; never trust on TCP). A fresh var/ directory, the launcher, and
`manage.py run_usage_report` publish exact figures for the metering rows inserted."""

from __future__ import annotations

import json
import os
import stat
import subprocess
import sys
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
SCRIPT = [sys.executable, str(ROOT / "scripts" / "with_postgres.py"), "--"]
pytestmark = pytest.mark.spark

# Inside the launcher, on the embedded server: migrate, two tenants, five metering rows, the report
# (as `make report` runs it), then the published figures as one JSON line.
REPORT = """
import json, django
from datetime import datetime, timedelta, timezone
django.setup()
from django.core.management import call_command
from apps.tenants.services import tenant_create
from apps.usage.models import CommandMeter, ReportDaily, ReportRun
call_command("migrate", "--noinput", verbosity=0)
a = tenant_create(slug="tenant-a", domain="a.example.test", name="A")
b = tenant_create(slug="tenant-b", domain="b.example.test", name="B")
common = dict(transport="http", channel="DIRECT_AUTHENTICATED", http_status=200, command_type="QUERY_EVENTS")
at = datetime.fromisoformat(DAY + "T12:00:00+00:00")
CommandMeter.objects.bulk_create([
    CommandMeter(tenant=a, at=at, code="SUCCESS", bytes_in=100, bytes_out=10, duration_ms=1.0, sender_did="did:x:1", **common),
    CommandMeter(tenant=a, at=at, code="SUCCESS", bytes_in=200, bytes_out=20, duration_ms=2.0, sender_did="did:x:2", **common),
    CommandMeter(tenant=a, at=at, code="INVALID_SIGNATURE", bytes_in=300, bytes_out=30, duration_ms=3.0, sender_did="did:x:1", **common),
    CommandMeter(tenant=b, at=at, code="SUCCESS", bytes_in=7, bytes_out=5, duration_ms=4.0, sender_did="did:x:3", **common),
    CommandMeter(tenant=b, at=at + timedelta(days=2), code="SUCCESS", bytes_in=1, bytes_out=1, duration_ms=1.0, **common),
])
call_command("run_usage_report", "--from", DAY, "--to", (at + timedelta(days=1)).date().isoformat())
run = ReportRun.objects.get()
rows = ReportDaily.objects.filter(run=run).order_by("tenant__slug", "day")
print("FIGURES " + json.dumps({"status": run.status, "daily": [
    [r.tenant.slug, r.day.isoformat(), r.commands, r.errors, r.bytes_in, r.bytes_out, r.active_identities] for r in rows
]}))
"""


def _env(var_dir: Path, **extra: str) -> dict:
    drop = ("DATABASE_URL", "DATABASE_URL_FILE", "TEST_DATABASE_URL", "REPORT_DATABASE_URL", "DJANGO_SETTINGS_MODULE")
    env = {k: v for k, v in os.environ.items() if k not in drop}
    return env | {"MEDIATOR_VAR_DIR": str(var_dir), "PYTHONPATH": str(ROOT)} | extra


@pytest.fixture(scope="module")
def var_dir(tmp_path_factory) -> Path:
    return tmp_path_factory.mktemp("embedded-report-var")


def test_a_usage_report_runs_end_to_end_on_the_embedded_postgresql(var_dir, spark_engine):
    # The session's warm engine as a remote one (this var/ names another deployment than its own).
    env = _env(
        var_dir,
        DJANGO_SETTINGS_MODULE="mediator_project.settings",
        SPARK_REMOTE=f"sc://127.0.0.1:{spark_engine}",
        USAGE_LAKE_URI=str(var_dir / "lake"),
    )
    day = (datetime.now(UTC) - timedelta(days=3)).date().isoformat()
    proc = subprocess.run(
        [*SCRIPT, sys.executable, "-c", f"DAY = {day!r}\n" + REPORT],
        cwd=ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=600,
    )
    figures = [line for line in proc.stdout.splitlines() if line.startswith("FIGURES ")]
    assert proc.returncode == 0 and figures, proc.stdout[-3000:] + proc.stderr[-3000:]
    assert json.loads(figures[0].split(" ", 1)[1]) == {
        "status": "succeeded",
        "daily": [
            ["tenant-a", day, 3, 1, 600, 60, 2],
            ["tenant-b", day, 1, 0, 7, 5, 1],
        ],
    }
    # The password reached the job through its environment only: never in a log of the run.
    password = (var_dir / "pg-password").read_text().strip()
    for log in [*var_dir.glob("usage-runs/*.log"), var_dir / "postgres.log"]:
        assert password not in log.read_text(errors="replace")
    assert password not in proc.stdout + proc.stderr


def test_tcp_needs_the_password_and_it_is_kept_private(var_dir):
    probe = """
import json, psycopg
from django.conf import settings
tcp = settings.EMBEDDED_PG_TCP
out = {}
for name, password in [("none", None), ("wrong", "not-the-password"), ("right", tcp["password"])]:
    kwargs = {"password": password} if password else {}
    try:
        with psycopg.connect(host=tcp["host"], port=tcp["port"], user="postgres", dbname="mediator", connect_timeout=5, **kwargs) as c:
            out[name] = c.execute("SELECT 1").fetchone()[0]
    except psycopg.OperationalError as exc:
        out[name] = "refused: " + ("password" if "password" in str(exc) else str(exc))
print("PROBE " + json.dumps([tcp["host"], out]))
"""
    env = _env(var_dir, DJANGO_SETTINGS_MODULE="mediator_project.settings")
    code = "import django; django.setup()\n" + probe
    proc = subprocess.run(
        [*SCRIPT, sys.executable, "-c", code], cwd=ROOT, env=env, capture_output=True, text=True, timeout=120
    )
    lines = [line for line in proc.stdout.splitlines() if line.startswith("PROBE ")]
    assert proc.returncode == 0 and lines, proc.stdout + proc.stderr
    assert json.loads(lines[0].split(" ", 1)[1]) == [
        "127.0.0.1",
        {"none": "refused: password", "wrong": "refused: password", "right": 1},
    ]
    assert stat.S_IMODE((var_dir / "pg-password").stat().st_mode) == 0o600
    hba = (var_dir / "pg" / "pg_hba.conf").read_text().split("\n")
    rules = [line.split() for line in hba if line.strip() and not line.lstrip().startswith("#")]
    assert rules == [["local", "all", "all", "trust"], ["host", "all", "all", "127.0.0.1/32", "scram-sha-256"]]
