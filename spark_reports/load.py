"""Load: compute the report's four small tables in ONE Spark operation, bring their rows back to the
job (a few hundred rows per tenant and day at most, whatever the metering volume), and append them
under the run's id in ONE database transaction, into tables created by Django migrations
(apps/usage/models.py). Nothing is created, truncated or dropped here.

Why not a JDBC write per table: each table would cost a `count` job and a write job, seconds of task
scheduling apiece on a busy small box, for a few hundred rows. One collect of the report's one
frame (transform.report_from: all four tables from one aggregation) computes everything at once;
one transaction makes the rows appear together (or not at all).

Staging and publishing: the rows carry the id of a ReportRun that is still `running`; readers
only ever read rows of `succeeded` runs. The launcher flips the run to `succeeded` in one UPDATE
after this process exits cleanly, or deletes the run's rows and marks it `failed` otherwise.
"""

from __future__ import annotations

from collections.abc import Callable

import psycopg

from .config import Database
from .transform import TABLE_COLUMNS, UsageReport

TABLES = {
    "daily": "usage_reportdaily",
    "by_type": "usage_reportcommandtype",
    "by_code": "usage_reporterrorcode",
    "top": "usage_reporttopidentity",
}
COLUMNS = TABLE_COLUMNS
# How many of a table's first COLUMNS are its key: its rows are written in that key's order (a
# CSV lists a tenant-day's rows in the order written), not in the order Spark returns them.
KEY_COLUMNS = {"daily": 2, "by_type": 4, "by_code": 3, "top": 3}
Rows = dict[str, list[tuple]]


def collect_report(report: UsageReport) -> Rows:
    """Every table's rows (tuples in COLUMNS order, by KEY_COLUMNS), from one Spark operation: the
    report's one frame, each row one table's row in that table's struct column (the others null)."""
    rows: Rows = {name: [] for name in TABLES}
    for row in report.rows.collect():
        for name in TABLES:
            value = row[name]
            if value is not None:
                rows[name].append(tuple(value))
    return {name: sorted(table_rows, key=_key(KEY_COLUMNS[name])) for name, table_rows in rows.items()}


def _key(columns: int) -> Callable[[tuple], tuple]:
    """A row's first `columns` values, to sort a table's rows by its key."""
    return lambda row: row[:columns]


def write_rows(db: Database, run_id: int, rows: Rows) -> dict[str, int]:
    """Append every table's rows tagged with `run_id`, in one transaction; returns rows per table."""
    statements = []
    for name, table_rows in rows.items():
        columns = ["run_id", *COLUMNS[name]]
        names = ", ".join(f'"{c}"' for c in columns)
        marks = ", ".join(["%s"] * len(columns))
        values = [(int(run_id), *row) for row in table_rows]
        statements.append((f'INSERT INTO "{TABLES[name]}" ({names}) VALUES ({marks})', values))
    with psycopg.connect(**db.connect_kwargs) as conn, conn.cursor() as cur:
        for sql, values in statements:
            if values:
                cur.executemany(sql, values)
    return {name: len(table_rows) for name, table_rows in rows.items()}


def load(report: UsageReport, db: Database, run_id: int, before_write=None) -> dict[str, int]:
    """Compute every table of `report` and write it under `run_id`; returns rows written per table.
    `before_write()` is called between computing and writing (progress)."""
    rows = collect_report(report)
    if before_write:
        before_write()
    return write_rows(db, run_id, rows)
