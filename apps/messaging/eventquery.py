"""QUERY_EVENTS on PostgreSQL as prepared statements (issue 8), for the tags and time-range filters.

Same predicates and order as the ORM path in services.events_query (PROTOCOL-DECISIONS §5): only
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

from apps.tenants.models import Tenant

from .models import EventTag, StoredEvent
from .sql import prepared_cursor

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


def page_statement(
    *, tenant: Tenant, owner_did: str, after: int | None, before: int | None, tags: list[str], offset: int, limit: int
) -> tuple[str, list]:
    """One page of QUERY_EVENTS as one SELECT and its parameters: rows of (public_id as text, payload,
    tags JSON text, timestamp, total, event_id), ordered by (timestamp, event_id), the protocol order.

    With tags, `total` is the number of matching events (a window count over the distinct matches,
    taken from the index before LIMIT); without tags it is NULL (`page_total` decides). The
    command path embeds this text after its nonce claim (apps/decentrl/storage.py)."""
    args = {"tenant": tenant, "owner_did": owner_did, "after": after, "before": before}
    if tags:
        where, params = _tags_where(**args, tags=tags)
        # One tag: its index entries are distinct events already, in (timestamp, event) order, so
        # no DISTINCT (a hash of every match and a sort: 25-39% of the statement's PostgreSQL CPU).
        distinct = "" if len(set(tags)) == 1 else "DISTINCT "
        sql = (
            f"SELECT e.public_id::text AS public_id, e.payload, e.encrypted_tags, e.timestamp, page.total,"
            f" page.event_id FROM ("
            f"SELECT event_id, timestamp, count(*) OVER () AS total FROM ("
            f"SELECT {distinct}event_id, timestamp FROM {_TAGS} WHERE {where}) matched "
            f"ORDER BY timestamp, event_id LIMIT %s OFFSET %s) page "
            f"JOIN {_EVENTS} e ON e.id = page.event_id AND e.tenant_id = %s AND e.owner_did = %s "
            f"ORDER BY page.timestamp, page.event_id"
        )
        return sql, [*params, limit, offset, tenant.pk, owner_did]
    where, params = _events_where(**args)
    sql = (
        f"SELECT public_id::text AS public_id, payload, encrypted_tags, timestamp, NULL::bigint AS total,"
        f" id AS event_id FROM {_EVENTS} WHERE {where} "
        f"ORDER BY {_EVENTS}.timestamp ASC, {_EVENTS}.id ASC LIMIT %s OFFSET %s"
    )
    return sql, [*params, limit, offset]


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
    args = {"tenant": tenant, "owner_did": owner_did, "after": after, "before": before, "tags": tags}
    sql, params = page_statement(**args, offset=offset, limit=limit)
    with prepared_cursor() as cur:
        cur.execute(sql, params)
        rows = cur.fetchall()
    return [r[:4] for r in rows], page_total(rows, **args, offset=offset, limit=limit)


def stored_events_count(
    *, tenant: Tenant, owner_did: str, after: int | None, before: int | None, tags: list[str]
) -> int:
    """`total` of QUERY_EVENTS: distinct matching events."""
    if tags:
        where, params = _tags_where(tenant=tenant, owner_did=owner_did, after=after, before=before, tags=tags)
        sql = f"SELECT count({'*' if len(set(tags)) == 1 else 'DISTINCT event_id'}) FROM {_TAGS} WHERE {where}"
    else:
        where, params = _events_where(tenant=tenant, owner_did=owner_did, after=after, before=before)
        sql = f"SELECT count(*) FROM {_EVENTS} WHERE {where}"
    with prepared_cursor() as cur:
        cur.execute(sql, params)
        return cur.fetchone()[0]
