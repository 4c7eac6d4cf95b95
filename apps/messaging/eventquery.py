"""QUERY_EVENTS on PostgreSQL as prepared statements, for the tags and time-range filters.

Same predicates and order as the ORM path in services.events_query (docs/protocol-readings.md §5): only
the owner's events, `after`/`before` strict, any tag equal, ordered by timestamp then arrival (id).

With tags, the tag rows decide everything: `messaging_eventtag` carries a copy of its event's
timestamp and `tag_ts` = (tenant, owner_did, tag, timestamp, event) covers them. One statement
takes the matching event ids from the index, counts them (a window count, before LIMIT), keeps
the page in (timestamp, id) order with LIMIT/OFFSET and reads just those events by primary key.
`tag_ts` is unique, so the entries of one tag are distinct events and come in page order
straight from the index; several tags take DISTINCT (an event matching several of them is one
item) and a sort. Only an empty page past the end needs a second statement for the total: a
COUNT over the same index entries.
Neither total ever reads `messaging_storedevent`. Without tags, the page and (when the page does
not imply it) the COUNT run on `messaging_storedevent` through `event_owner_ts`.
"""

from __future__ import annotations

from functools import cache

from apps.tenants.models import Tenant

from .models import EventTag, StoredEvent
from .sql import prepared_cursor

_EVENTS = StoredEvent._meta.db_table
_TAGS = EventTag._meta.db_table


def _time_range(table: str, after: bool, before: bool) -> str:
    return (f" AND {table}.timestamp > %s" if after else "") + (f" AND {table}.timestamp < %s" if before else "")


def _range_params(after: int | None, before: int | None) -> list:
    return [v for v in (after, before) if v is not None]


# The statement texts depend only on the filter's shape (tags or not, one tag or several, which
# time bounds), so each shape's text is built once per process and reused: the same string
# object every call (psycopg's prepared-statement lookup hashes it once).


@cache
def _events_where(after: bool, before: bool) -> str:
    """WHERE clause of QUERY_EVENTS without tags, on the events (event_owner_ts); parameters
    tenant, owner, then the bounds given."""
    return f"{_EVENTS}.tenant_id = %s AND {_EVENTS}.owner_did = %s{_time_range(_EVENTS, after, before)}"


@cache
def _tags_where(one_tag: bool, after: bool, before: bool) -> str:
    """WHERE clause of QUERY_EVENTS with tags, on the tag rows (tag_ts: every predicate is an index
    condition); parameters tenant, owner, the tag (one tag) or the array of distinct tags, then the
    bounds given."""
    # `= $n`, not `= ANY($n)` for one tag: the generic plan of ANY assumes a 10-element array,
    # estimates 10x the rows of one tag and loses to the custom plan, so PostgreSQL re-planned the
    # prepared statement on every execution (pg_prepared_statements: 0 generic, all custom). With `=` the estimates agree and the generic plan is kept.
    tag_sql = f"{_TAGS}.tag = %s" if one_tag else f"{_TAGS}.tag = ANY(%s)"
    return f"{_TAGS}.tenant_id = %s AND {_TAGS}.owner_did = %s AND {tag_sql}{_time_range(_TAGS, after, before)}"


def _tag_param(tags: list[str]) -> str | list[str]:
    distinct = list(dict.fromkeys(tags))
    return distinct[0] if len(distinct) == 1 else distinct


@cache
def page_sql(*, tagged: bool, one_tag: bool, after: bool, before: bool) -> str:
    """The text of `page_statement` for one filter shape (built once per shape)."""
    if tagged:
        # One tag: its index entries are distinct events already, in (timestamp, event) order, so
        # no DISTINCT (a hash of every match and a sort, the larger part of the statement's PostgreSQL CPU).
        distinct = "" if one_tag else "DISTINCT "
        return (
            f"SELECT e.public_id::text AS public_id, e.payload, e.encrypted_tags, e.timestamp, page.total,"
            f" page.event_id FROM ("
            f"SELECT event_id, timestamp, count(*) OVER () AS total FROM ("
            f"SELECT {distinct}event_id, timestamp FROM {_TAGS} WHERE {_tags_where(one_tag, after, before)}) matched "
            f"ORDER BY timestamp, event_id LIMIT %s OFFSET %s) page "
            f"JOIN {_EVENTS} e ON e.id = page.event_id AND e.tenant_id = %s AND e.owner_did = %s "
            f"ORDER BY page.timestamp, page.event_id"
        )
    return (
        f"SELECT public_id::text AS public_id, payload, encrypted_tags, timestamp, NULL::bigint AS total,"
        f" id AS event_id FROM {_EVENTS} WHERE {_events_where(after, before)} "
        f"ORDER BY {_EVENTS}.timestamp ASC, {_EVENTS}.id ASC LIMIT %s OFFSET %s"
    )


def page_statement(
    *, tenant: Tenant, owner_did: str, after: int | None, before: int | None, tags: list[str], offset: int, limit: int
) -> tuple[str, list]:
    """One page of QUERY_EVENTS as one SELECT and its parameters: rows of (public_id as text, payload,
    tags JSON text, timestamp, total, event_id), ordered by (timestamp, event_id), the protocol order.

    With tags, `total` is the number of matching events (a window count over the distinct matches,
    taken from the index before LIMIT); without tags it is NULL (`page_total` decides). The
    command path embeds this text after its nonce claim (apps/decentrl/storage.py). The text is
    `page_sql` of the filter's shape: one string per shape, built once."""
    rng = _range_params(after, before)
    tag = _tag_param(tags) if tags else None
    sql = page_sql(
        tagged=bool(tags), one_tag=not isinstance(tag, list), after=after is not None, before=before is not None
    )
    if tags:
        return sql, [tenant.pk, owner_did, tag, *rng, limit, offset, tenant.pk, owner_did]
    return sql, [tenant.pk, owner_did, *rng, limit, offset]


def page_total(
    rows: list[tuple],
    *,
    tenant: Tenant,
    owner_did: str,
    after: int | None,
    before: int | None,
    tags: list[str],
    offset: int,
    limit: int,
) -> int:
    """`total` of the page `page_statement` gave as `rows`: carried by the rows (tags), implied by a
    partial page (or an empty first page), else a COUNT (an empty page past the end, a full page
    without tags)."""
    if tags and rows:
        return rows[0][4]
    n = len(rows)
    if offset == 0 and n == 0:
        return 0
    if not tags and n < limit and n > 0:
        return offset + n
    return stored_events_count(tenant=tenant, owner_did=owner_did, after=after, before=before, tags=tags)


def stored_events(
    *, tenant: Tenant, owner_did: str, after: int | None, before: int | None, tags: list[str], offset: int, limit: int
) -> tuple[list[tuple], int]:
    """One page of QUERY_EVENTS and its `total`, on its own (`page_statement`, then `page_total`):
    (public_id, payload, tags JSON text, timestamp) rows in protocol order, and the number of
    matching events."""
    sql, params = page_statement(
        tenant=tenant, owner_did=owner_did, after=after, before=before, tags=tags, offset=offset, limit=limit
    )
    with prepared_cursor() as cur:
        cur.execute(sql, params)
        rows = cur.fetchall()
    total = page_total(
        rows, tenant=tenant, owner_did=owner_did, after=after, before=before, tags=tags, offset=offset, limit=limit
    )
    return [r[:4] for r in rows], total


def stored_events_count(
    *, tenant: Tenant, owner_did: str, after: int | None, before: int | None, tags: list[str]
) -> int:
    """`total` of QUERY_EVENTS: distinct matching events."""
    rng = _range_params(after, before)
    if tags:
        tag = _tag_param(tags)
        one_tag = not isinstance(tag, list)
        where = _tags_where(one_tag, after is not None, before is not None)
        sql = f"SELECT count({'*' if one_tag else 'DISTINCT event_id'}) FROM {_TAGS} WHERE {where}"
        params = [tenant.pk, owner_did, tag, *rng]
    else:
        sql = f"SELECT count(*) FROM {_EVENTS} WHERE {_events_where(after is not None, before is not None)}"
        params = [tenant.pk, owner_did, *rng]
    with prepared_cursor() as cur:
        cur.execute(sql, params)
        return cur.fetchone()[0]
