"""QUERY_EVENTS on PostgreSQL as prepared statements (issue 8), for the tags and time-range filters.

Same predicates and order as the ORM path in services.events_query (PROTOCOL-DECISIONS §5): only
the owner's events, `after`/`before` strict, any tag equal, ordered by timestamp then arrival (id).

With tags, the statements read the tag rows only: `messaging_eventtag` carries a copy of its
event's timestamp and `tag_ts` = (tenant, owner_did, tag, timestamp, event) covers them. The page
takes the distinct matching event ids in (timestamp, id) order with LIMIT/OFFSET from the index
(an event matching several of the tags is one item), then reads just those events by primary key;
the total is COUNT(DISTINCT event_id) over the same index entries and never touches the events.
Without tags, both statements run on `messaging_storedevent` through `event_owner_ts`.
"""

from __future__ import annotations

from apps.tenants.models import Tenant

from .fastpath import _prepared_cursor
from .models import EventTag, StoredEvent

_EVENTS = StoredEvent._meta.db_table
_TAGS = EventTag._meta.db_table


def _time_range(table: str, after: int | None, before: int | None) -> tuple[str, list]:
    sql, params = "", []
    if after is not None:
        sql += f" AND {table}.timestamp > %s"
        params.append(after)
    if before is not None:
        sql += f" AND {table}.timestamp < %s"
        params.append(before)
    return sql, params


def _events_where(*, tenant: Tenant, owner_did: str, after: int | None, before: int | None) -> tuple[str, list]:
    """WHERE clause of QUERY_EVENTS without tags, on the events (event_owner_ts)."""
    rng, rng_params = _time_range(_EVENTS, after, before)
    return f"{_EVENTS}.tenant_id = %s AND {_EVENTS}.owner_did = %s{rng}", [tenant.pk, owner_did, *rng_params]


def _tags_where(
    *, tenant: Tenant, owner_did: str, after: int | None, before: int | None, tags: list[str]
) -> tuple[str, list]:
    """WHERE clause of QUERY_EVENTS with tags, on the tag rows (tag_ts: every predicate is an index condition)."""
    rng, rng_params = _time_range(_TAGS, after, before)
    tags = list(dict.fromkeys(tags))
    if len(tags) == 1:
        # `= $n`, not `= ANY($n)`: the generic plan of ANY assumes a 10-element array, estimates
        # 10x the rows of one tag and loses to the custom plan, so PostgreSQL re-planned the
        # prepared statement on every execution (pg_prepared_statements: 0 generic, all custom;
        # ~0.3 ms of planning). With `=` the estimates agree and the generic plan is kept.
        tag_sql, tag_param = f"{_TAGS}.tag = %s", tags[0]
    else:
        tag_sql, tag_param = f"{_TAGS}.tag = ANY(%s)", list(tags)
    return (
        f"{_TAGS}.tenant_id = %s AND {_TAGS}.owner_did = %s AND {tag_sql}{rng}",
        [tenant.pk, owner_did, tag_param, *rng_params],
    )


def stored_events_page(
    *, tenant: Tenant, owner_did: str, after: int | None, before: int | None, tags: list[str], offset: int, limit: int
) -> list[tuple]:
    """One page of QUERY_EVENTS: (public_id, payload, tags JSON text, timestamp) rows in protocol order."""
    if tags:
        where, params = _tags_where(tenant=tenant, owner_did=owner_did, after=after, before=before, tags=tags)
        sql = (
            f"SELECT e.public_id, e.payload, e.encrypted_tags, e.timestamp FROM ("
            f"SELECT DISTINCT event_id, timestamp FROM {_TAGS} WHERE {where} "
            f"ORDER BY timestamp, event_id LIMIT %s OFFSET %s) page "
            f"JOIN {_EVENTS} e ON e.id = page.event_id AND e.tenant_id = %s AND e.owner_did = %s "
            f"ORDER BY page.timestamp, page.event_id"
        )
        params = [*params, limit, offset, tenant.pk, owner_did]
    else:
        where, params = _events_where(tenant=tenant, owner_did=owner_did, after=after, before=before)
        sql = (
            f"SELECT public_id, payload, encrypted_tags, timestamp FROM {_EVENTS} WHERE {where} "
            f"ORDER BY {_EVENTS}.timestamp ASC, {_EVENTS}.id ASC LIMIT %s OFFSET %s"
        )
        params = [*params, limit, offset]
    with _prepared_cursor() as cur:
        cur.execute(sql, params)
        return cur.fetchall()


def stored_events_count(
    *, tenant: Tenant, owner_did: str, after: int | None, before: int | None, tags: list[str]
) -> int:
    """`total` of QUERY_EVENTS: distinct matching events."""
    if tags:
        where, params = _tags_where(tenant=tenant, owner_did=owner_did, after=after, before=before, tags=tags)
        sql = f"SELECT count(DISTINCT event_id) FROM {_TAGS} WHERE {where}"
    else:
        where, params = _events_where(tenant=tenant, owner_did=owner_did, after=after, before=before)
        sql = f"SELECT count(*) FROM {_EVENTS} WHERE {where}"
    with _prepared_cursor() as cur:
        cur.execute(sql, params)
        return cur.fetchone()[0]
