"""Compaction of the lake's closed days (docs/usage.md "The metering lake"): a day's many small export
files rewritten as one compaction's, readers switched to them in one UPDATE, then the cleaning."""

from __future__ import annotations

from collections.abc import Callable
from datetime import UTC, date, datetime, timedelta

import psycopg
from pyspark.sql import SparkSession
from pyspark.sql import functions as F

from .config import Database
from .extract import max_partitions
from .lake_cleanup import CLEAN_AFTER, clean
from .lake_export import write_meters, written
from .lake_layout import lake_uri
from .lake_log import COMPACT_LOCK_KEY, COMPACT_LOOKBACK_DAYS, EXPORT_TABLE, Attempt, commit, exclusive, scalar
from .lake_read import read_meters


def _days_to_compact(pg: psycopg.Connection, today: date) -> list[date]:
    """Closed days of the last COMPACT_LOOKBACK_DAYS with files of more than one export since their
    last compaction, or of any export since it."""
    since = today - timedelta(days=COMPACT_LOOKBACK_DAYS)
    exports = pg.execute(
        f"SELECT id, first_at, last_at FROM {EXPORT_TABLE}"
        " WHERE state = 'committed' AND rows > 0 AND last_at >= %s AND first_at < %s",
        (
            datetime(since.year, since.month, since.day, tzinfo=UTC),
            datetime(today.year, today.month, today.day, tzinfo=UTC),
        ),
    ).fetchall()
    covered: dict[date, int] = dict(
        pg.execute(
            f"SELECT DISTINCT ON (day) day, covers FROM {EXPORT_TABLE}"
            " WHERE state = 'compacted' AND day >= %s ORDER BY day, id DESC",
            (since,),
        ).fetchall()
    )
    days = []
    for i in range(COMPACT_LOOKBACK_DAYS):
        day = since + timedelta(days=i)
        newer = [
            e
            for e, first, last in exports
            if first.astimezone(UTC).date() <= day <= last.astimezone(UTC).date() and e > covered.get(day, 0)
        ]
        if len(newer) > 1 or (newer and day in covered):
            days.append(day)
    return days


def compact_day(
    spark: SparkSession,
    db: Database,
    pg: psycopg.Connection,
    lake: str,
    day: date,
    *,
    after_write: Callable[[Attempt], None] | None = None,
) -> dict:
    """Rewrite `day`'s metering files as readers see them into one compaction's folders, then switch
    readers to them in one UPDATE (docs/usage.md "The metering lake"). Holds the compaction's lock (`pg`);
    exports go on meanwhile (their rows are past `covers`: readers keep them)."""
    now = datetime.now(UTC)
    last = scalar(pg.execute(f"SELECT COALESCE(MAX(id), 0) FROM {EXPORT_TABLE} WHERE state = 'committed'"))
    compaction = scalar(
        pg.execute(
            f"INSERT INTO {EXPORT_TABLE} (lo_id, hi_id, state, rows, started_at, day, covers)"
            " VALUES (0, 0, 'pending', 0, %s, %s, %s) RETURNING id",
            (now, day, last),
        )
    )
    attempt = Attempt(int(compaction), 0, 0)
    rows = read_meters(spark, db, day, day, lake=lake)
    expected = rows.count()
    tasks = max_partitions()
    out = rows.withColumn("export", F.lit(-attempt.export).cast("long")).repartition(tasks, "tenant_id")
    write_meters(spark, out, lake)
    if after_write:
        after_write(attempt)
    stats = written(spark, lake, -attempt.export, day)
    if stats["rows"] != expected:
        raise RuntimeError(f"compaction {attempt.export} of {day} wrote {stats['rows']} rows, not {expected}")
    commit(pg, attempt, stats, state="compacted")
    return {"day": day.isoformat(), "compaction": attempt.export, "rows": expected}


def compact(
    spark: SparkSession,
    db: Database,
    lake: str | None = None,
    *,
    today: date | None = None,
    now: datetime | None = None,
    clean_after: timedelta = CLEAN_AFTER,
    after_write: Callable[[Attempt], None] | None = None,
) -> dict:
    """Compact the closed days that need it, then clean what is old enough (docs/usage.md "The metering lake")."""
    lake = lake or lake_uri()
    now = now or datetime.now(UTC)
    with exclusive(db, COMPACT_LOCK_KEY) as pg:
        pg.execute(
            f"UPDATE {EXPORT_TABLE} SET state = 'abandoned', finished_at = %s WHERE state = 'pending' AND day IS NOT NULL",
            (now,),
        )
        compacted = [
            compact_day(spark, db, pg, lake, day, after_write=after_write)
            for day in _days_to_compact(pg, today or now.date())
        ]
        cleaned = clean(pg, lake, now=now, clean_after=clean_after)
    return {"compacted": compacted, "cleaned_folders": cleaned}
