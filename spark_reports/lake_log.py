"""The lake's commit log, `usage_meterexport` (docs/usage.md "The metering lake"): one row per export or
compaction attempt, the locks that keep one of each at a time, the start and commit of an export
attempt, and what readers keep by it (`LakeState`)."""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from datetime import UTC, date, datetime, timedelta
from typing import Any

import psycopg
from pyspark.sql import Column
from pyspark.sql import functions as F

from .config import Database

EXPORT_TABLE = "usage_meterexport"
METER_TABLE = "usage_commandmeter"
# The advisory locks (any constants no other code uses): one export at a time, one compaction at a
# time; an export never waits for a compaction (a report's export would wait minutes).
LOCK_KEY = 0x6D65746572  # "meter"
COMPACT_LOCK_KEY = LOCK_KEY + 1
# A snapshot of the inputs covers the days from the previous attempt's start, less this margin
# (a transaction that stamped its rows before the previous attempt and committed after it).
SNAPSHOT_MARGIN = timedelta(hours=1)
# The recent days: compaction looks back this many closed days for exports to merge (late rows of older
# days stay in their export's files: readers see them all the same), and cleaning looks at the attempts
# and snapshots of as many days.
COMPACT_LOOKBACK_DAYS = 7


@dataclass(frozen=True)
class LakeState:
    """What the database says the lake holds: the watermark, the last committed attempt, the
    attempts whose files must never be read, the latest compaction (id, covers) of each day asked
    for, and which attempt's inputs snapshot holds each day (`holder`)."""

    watermark: int
    last_export: int
    abandoned: tuple[int, ...]
    compacted: dict[date, tuple[int, int]] = field(default_factory=dict)
    snapshots: tuple[tuple[date | None, int], ...] = ()  # (inputs_from, last committed attempt with it)

    def holder(self, day: date) -> int | None:
        """The last committed attempt whose inputs snapshot covers `day`."""
        found = [export for since, export in self.snapshots if since is None or since <= day]
        return max(found) if found else None

    def visible(self, day: Column, export: Column) -> Column:
        """The rule a reader keeps a metering file by (docs/usage.md "The metering lake")."""
        kept = (export > 0) & (export <= F.lit(self.last_export))
        if self.abandoned:
            kept &= ~export.isin(*self.abandoned)
        rule = None
        for d, (compaction, covers) in sorted(self.compacted.items()):
            then = (export == F.lit(-compaction)) | (kept & (export > F.lit(covers)))
            rule = F.when(day == F.lit(d), then) if rule is None else rule.when(day == F.lit(d), then)
        return kept if rule is None else rule.otherwise(kept)


def connect(db: Database) -> psycopg.Connection:
    return psycopg.connect(**db.connect_kwargs, autocommit=True)


def one_row(cursor: psycopg.Cursor[Any]) -> tuple[Any, ...]:
    """A statement's one row (an aggregate has one)."""
    row = cursor.fetchone()
    if row is None:
        raise RuntimeError("the statement returned no row")
    return row


def scalar(cursor: psycopg.Cursor[Any]) -> Any:
    """The first column of a statement's one row (an aggregate or an INSERT ... RETURNING has one)."""
    return one_row(cursor)[0]


def _query(db: Database, sql: str, params: tuple = ()) -> list[tuple]:
    """One read of the export's own small table, in its own connection."""
    with connect(db) as pg:
        return pg.execute(sql, params).fetchall()


def lake_state(db: Database, date_from: date | None = None, date_to: date | None = None) -> LakeState:
    """The lake's state, with the compactions of [date_from, date_to] (none when not given)."""
    with connect(db) as pg:
        watermark, last = one_row(
            pg.execute(
                f"SELECT COALESCE(MAX(hi_id), 0), COALESCE(MAX(id), 0) FROM {EXPORT_TABLE} WHERE state = 'committed'"
            )
        )
        abandoned = pg.execute(
            f"SELECT id FROM {EXPORT_TABLE} WHERE state = 'abandoned' AND day IS NULL AND id < %s ORDER BY id",
            (last,),
        ).fetchall()
        compacted: dict[date, tuple[int, int]] = {}
        if date_from is not None and date_to is not None:
            for day, compaction, covers in pg.execute(
                f"SELECT DISTINCT ON (day) day, id, covers FROM {EXPORT_TABLE}"
                " WHERE state = 'compacted' AND day BETWEEN %s AND %s ORDER BY day, id DESC",
                (date_from, date_to),
            ):
                compacted[day] = (int(compaction), int(covers))
        snapshots = pg.execute(
            f"SELECT inputs_from, MAX(id) FROM {EXPORT_TABLE} WHERE state = 'committed' GROUP BY inputs_from"
        ).fetchall()
    return LakeState(
        int(watermark),
        int(last),
        tuple(int(r[0]) for r in abandoned),
        compacted,
        tuple((since, int(export)) for since, export in snapshots),
    )


@dataclass(frozen=True)
class Attempt:
    export: int
    lo: int  # exclusive
    hi: int  # inclusive
    inputs_from: date | None = None  # the inputs snapshot's first day (None: every day)


@contextmanager
def exclusive(db: Database, key: int = LOCK_KEY) -> Iterator[psycopg.Connection]:
    """One export (or compaction) at a time, for as long as the job lives (released by the server
    when it dies)."""
    with connect(db) as pg:
        pg.execute("SELECT pg_advisory_lock(%s)", (key,))
        try:
            yield pg
        finally:
            pg.execute("SELECT pg_advisory_unlock(%s)", (key,))


def begin(pg: psycopg.Connection) -> tuple[Attempt, int]:
    """Abandon an interrupted attempt, then record the next one over (watermark, MAX(id)] (an empty
    range when nothing is new: the inputs' snapshot is taken all the same); returns it and how many
    attempts were abandoned."""
    now = datetime.now(UTC)
    abandon = f"UPDATE {EXPORT_TABLE} SET state = 'abandoned', finished_at = %s WHERE state = 'pending' AND day IS NULL"
    previous = f"SELECT COALESCE(MAX(hi_id), 0), MAX(started_at) FROM {EXPORT_TABLE} WHERE state = 'committed'"
    insert = (
        f"INSERT INTO {EXPORT_TABLE} (lo_id, hi_id, state, rows, started_at, inputs_from)"
        " VALUES (%s, %s, 'pending', 0, %s, %s) RETURNING id"
    )
    with pg.transaction():
        abandoned = pg.execute(abandon, (now,)).rowcount
        lo, since = one_row(pg.execute(previous))
        pg.execute(f"LOCK TABLE {METER_TABLE} IN SHARE MODE")
        hi = max(lo, scalar(pg.execute(f"SELECT COALESCE(MAX(id), 0) FROM {METER_TABLE}")))
        inputs_from = (since - SNAPSHOT_MARGIN).astimezone(UTC).date() if since else None
        export = scalar(pg.execute(insert, (lo, hi, now, inputs_from)))
    return Attempt(int(export), int(lo), int(hi), inputs_from), abandoned


def commit(pg: psycopg.Connection, attempt: Attempt, stats: dict, state: str = "committed") -> None:
    sql = (
        f"UPDATE {EXPORT_TABLE} SET state = %s, rows = %s, first_at = %s, last_at = %s, finished_at = %s"
        " WHERE id = %s AND state = 'pending'"
    )
    first, last = stats.get("first_at"), stats.get("last_at")
    utc = [v.replace(tzinfo=UTC) if v is not None and v.tzinfo is None else v for v in (first, last)]
    updated = pg.execute(sql, (state, stats["rows"], *utc, datetime.now(UTC), attempt.export)).rowcount
    if updated != 1:
        raise RuntimeError(f"export {attempt.export} was no longer pending")


def rows_estimate(db: Database, date_from: date, date_to: date) -> int:
    """Rows of the committed attempts whose time span meets the range (progress and sizing only)."""
    lo = datetime(date_from.year, date_from.month, date_from.day, tzinfo=UTC)
    hi = lo + timedelta(days=(date_to - date_from).days + 1)
    found = _query(
        db,
        f"SELECT COALESCE(SUM(rows), 0) FROM {EXPORT_TABLE} WHERE state = 'committed' AND last_at >= %s AND first_at < %s",
        (lo, hi),
    )
    return int(found[0][0])
