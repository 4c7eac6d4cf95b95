"""Deleting the lake's files (docs/usage.md "The metering lake"): what committed compactions replaced and
later snapshots superseded, once no report may still read it, the files of dead attempts, and the
retention's whole days."""

from __future__ import annotations

from collections.abc import Callable
from datetime import UTC, date, datetime, timedelta
from functools import partial

import psycopg
from pyarrow import fs as pafs

from .lake_layout import inputs_uri, meters_uri, pyarrow_uri
from .lake_log import COMPACT_LOOKBACK_DAYS, EXPORT_TABLE, LakeState

# Replaced files are deleted this long after their replacement committed: longer than a report
# (USAGE_REPORT_TIMEOUT_S, 1 hour by default) that listed them before may still read them.
CLEAN_AFTER = timedelta(hours=2)


def _kept_after_compaction(compaction: int, covers: int, export: int) -> bool:
    """A day's folder that stays once its compaction is old enough: the compaction's own (-id) and
    the attempts after those it covers."""
    return export == -compaction or export > covers


def _snapshot_kept(holder: int, old: bool, dead: set[int], export: int) -> bool:
    """A day's snapshot folder that stays: the holder's; an earlier one until the holder is old
    enough; a later one until its attempt is known dead (an export may be writing it)."""
    return export == holder or (export < holder and not old) or (export > holder and export not in dead)


def _delete_folders(uri: str, pattern_root: str, keep: Callable[[int], bool]) -> int:
    """Delete the `export=X` folders under `uri`/`pattern_root` (one level of `tenant_id=` folders or
    none) whose X `keep` refuses; returns how many."""
    filesystem, root = pafs.FileSystem.from_uri(pyarrow_uri(uri))
    try:
        entries = filesystem.get_file_info(pafs.FileSelector(f"{root}/{pattern_root}", recursive=True))
    except FileNotFoundError:
        return 0
    deleted = 0
    for entry in entries:
        if entry.type == pafs.FileType.Directory and entry.base_name.startswith("export="):
            if not keep(int(entry.base_name[len("export=") :])):
                filesystem.delete_dir(entry.path)
                deleted += 1
    return deleted


def clean(
    pg: psycopg.Connection, lake: str, *, now: datetime | None = None, clean_after: timedelta = CLEAN_AFTER
) -> int:
    """Delete what committed compactions replaced and what later snapshots superseded, once that
    happened `clean_after` ago, and the files of dead attempts; returns how many folders went."""
    now = now or datetime.now(UTC)
    deleted = 0
    # The compactions of the days with one old enough and not cleaned yet. A day's files are deleted
    # only by its latest compaction once that is old enough itself (a report that began before it
    # may read what the one before it kept); an older one has nothing left of its own to delete.
    done = pg.execute(
        f"SELECT id, day, covers, finished_at < %(old)s, id = MAX(id) OVER (PARTITION BY day) FROM {EXPORT_TABLE}"
        f" WHERE state = 'compacted' AND day IN (SELECT day FROM {EXPORT_TABLE} WHERE state = 'compacted'"
        " AND cleaned_at IS NULL AND finished_at < %(old)s)",
        {"old": now - clean_after},
    ).fetchall()
    cleaned = []
    for compaction, day, covers, old, latest in done:
        if old and latest:
            deleted += _delete_folders(
                meters_uri(lake),
                f"day={day.isoformat()}",
                partial(_kept_after_compaction, compaction, covers),
            )
        if old:
            cleaned.append(compaction)
    if cleaned:
        pg.execute(
            f"UPDATE {EXPORT_TABLE} SET cleaned_at = %s WHERE id = ANY(%s) AND cleaned_at IS NULL", (now, cleaned)
        )
    # Snapshots: of the recent days (the only ones later attempts cover again).
    committed: dict[int, datetime | None] = dict(
        pg.execute(
            f"SELECT id, finished_at FROM {EXPORT_TABLE} WHERE state = 'committed' AND started_at >= %s",
            (now - timedelta(days=COMPACT_LOOKBACK_DAYS),),
        ).fetchall()
    )
    state_rows = pg.execute(
        f"SELECT inputs_from, MAX(id) FROM {EXPORT_TABLE} WHERE state = 'committed' GROUP BY inputs_from"
    ).fetchall()
    state = LakeState(0, 0, (), snapshots=tuple((since, int(e)) for since, e in state_rows))
    # A later attempt's folder is deleted only once it is known dead: an export may be writing it.
    dead = {
        int(r[0])
        for r in pg.execute(
            f"SELECT id FROM {EXPORT_TABLE} WHERE state = 'abandoned' AND started_at >= %s",
            (now - timedelta(days=COMPACT_LOOKBACK_DAYS),),
        )
    }
    today = now.date()
    for i in range(COMPACT_LOOKBACK_DAYS + 1):
        day = today - timedelta(days=i)
        holder = state.holder(day)
        if holder is None or holder not in committed:
            continue
        finished = committed[holder]
        old_enough = finished is not None and finished < now - clean_after
        deleted += _delete_folders(
            inputs_uri(lake),
            f"day={day.isoformat()}",
            partial(_snapshot_kept, holder, old_enough, dead),
        )
    return deleted


def drop_days(lake: str, keep_days: int, *, today: date | None = None) -> list[str]:
    """Delete the lake's day partitions older than `keep_days` days (whole directories, of the
    metering rows and of the inputs' snapshots); returns the metering rows' days dropped."""
    cutoff = (today or datetime.now(UTC).date()) - timedelta(days=keep_days)
    _drop_before(inputs_uri(lake), cutoff)
    return _drop_before(meters_uri(lake), cutoff)


def _drop_before(uri: str, cutoff: date) -> list[str]:
    filesystem, root = pafs.FileSystem.from_uri(pyarrow_uri(uri))
    dropped = []
    try:
        entries = filesystem.get_file_info(pafs.FileSelector(root, allow_not_found=True))
    except FileNotFoundError:
        return []
    for entry in entries:
        name = entry.base_name
        if entry.type != pafs.FileType.Directory or not name.startswith("day="):
            continue
        try:
            day = date.fromisoformat(name[4:])
        except ValueError:
            continue
        if day < cutoff:
            filesystem.delete_dir(entry.path)
            dropped.append(name)
    return sorted(dropped)
