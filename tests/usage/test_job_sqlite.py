"""The same job on the embedded default: SQLite in WAL mode, timestamps read as text.

Expected figures are computed in plain Python from the dataset. Delivery percentiles must equal the
nearest-rank percentile exactly (every group has far fewer than the 10 000-value accuracy); command
latency percentiles must lie in [exact, exact * e^(1/1000)) (one latency bucket, transform.py).
"""

from __future__ import annotations

import json
import sqlite3
import subprocess
import sys
from pathlib import Path

import pytest

from spark_reports.config import database_from_url
from spark_reports.usage_report import run as run_job

from . import dataset

pytestmark = pytest.mark.spark
ROOT = Path(__file__).resolve().parents[2]
TOL = 1e-9


@pytest.fixture(scope="module")
def sqlite_db(tmp_path_factory):
    path = tmp_path_factory.mktemp("usage-sqlite") / "mediator.sqlite3"
    out = subprocess.run(
        [sys.executable, "-m", "tests.usage.sqlite_fixture", str(path)],
        cwd=ROOT,
        capture_output=True,
        text=True,
        check=True,
        timeout=120,
    )
    return path, json.loads(out.stdout.strip().splitlines()[-1])


def test_the_job_on_sqlite_matches_python(spark, sqlite_db):
    path, ids = sqlite_db
    with sqlite3.connect(path) as conn:
        assert conn.execute("PRAGMA journal_mode").fetchone()[0] == "wal"
        conn.execute(
            "INSERT INTO usage_reportrun (public_id, kind, status, date_from, date_to, created_at, row_counts, progress,"
            " error, log_tail) VALUES ('0123456789abcdef0123456789abcdef', 'manual', 'running', '2026-01-10',"
            " '2026-01-12', '2026-01-13 00:00:00', '{}', '{}', '', '')"
        )
        run_id = conn.execute("SELECT max(id) FROM usage_reportrun").fetchone()[0]
    first, last = dataset.DAYS[0], dataset.DAYS[-1]
    db = database_from_url(f"sqlite:///{path}")
    counts = run_job(spark, db, run_id=run_id, date_from=first, date_to=last, tenant_ids=None)

    expected = dataset.expected_daily(dataset.build(["a", "b"]), first, last)
    key_of = {v: k for k, v in ids.items()}
    with sqlite3.connect(path) as conn:
        conn.row_factory = sqlite3.Row
        rows = conn.execute("SELECT * FROM usage_reportdaily WHERE run_id = ?", [run_id]).fetchall()
        top = conn.execute("SELECT count(*) FROM usage_reporttopidentity WHERE run_id = ?", [run_id]).fetchone()[0]
    assert counts["daily"] == len(rows) == len(expected) == 6
    assert counts["top"] == top
    # The run's own seconds by phase (the launcher's process adds session and stop), for the bench.
    assert sorted(counts["phases"]) == ["bounds", "export", "merge", "tables", "write"]
    assert counts["exported"] == len(dataset.build(["a", "b"]).meters)
    assert counts["seconds"] >= sum(counts["phases"].values()) - 0.01
    got = {(key_of[r["tenant_id"]], r["day"]): dict(r) for r in rows}
    for (key, day), exp in expected.items():
        row = got[(key, day.isoformat())]  # Django's DateField text format
        for name, value in exp.items():
            if name in dataset.LATENCY_COLUMNS:
                assert dataset.latency_within_bound(row[name], value), (key, day, name, row[name], value)
            else:
                assert row[name] == pytest.approx(value, abs=TOL), (key, day, name)
