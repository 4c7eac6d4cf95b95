"""A deterministic usage dataset, written to PostgreSQL (ORM), for the job tests.

Values are plain Python so that expectations can be computed independently of Spark.
"""

from __future__ import annotations

import math
import random
from dataclasses import dataclass, field
from datetime import UTC, date, datetime, timedelta

from spark_reports.extract import LATENCY_BUCKETS_PER_E

DAYS = [date(2026, 1, 10), date(2026, 1, 11), date(2026, 1, 12)]
TYPES = ["QUERY_EVENTS", "SAVE_EVENTS", "ACKNOWLEDGE_EVENTS", "REQUEST_COMMUNICATION_CONTRACT", ""]
CODES = ["SUCCESS"] * 16 + ["EVICTED", "INVALID_SIGNATURE", "UNAUTHORIZED_COMMAND", "DUPLICATE_NONCE"]
# Not errors: EVICTED is a DIDComm forward stored after the overflow policy evicted the oldest message.
NOT_ERRORS = ("SUCCESS", "EVICTED")
# Each protocol metered as itself, with the channel its front door meters (apps/usage/metering.py).
PROTOCOLS = {"decentrl": "DIRECT_AUTHENTICATED", "didcomm-v2": "didcomm-v2", "didcomm-v1": "didcomm-v1"}
# Rows on each edge of every UTC day (the first and the last microsecond), per tenant and day.
EDGES = 2


@dataclass
class Dataset:
    meters: list[dict] = field(default_factory=list)  # tenant, at, command_type, code, ...
    contracts: list[dict] = field(default_factory=list)  # tenant, created_at, registration: bool
    pending: list[dict] = field(default_factory=list)  # tenant, created_at, acknowledged_at
    stored: list[dict] = field(default_factory=list)  # tenant, created_at, payload_bytes


def _at(rng: random.Random, day: date) -> datetime:
    return datetime(day.year, day.month, day.day, tzinfo=UTC) + timedelta(
        seconds=rng.randrange(86_400), microseconds=rng.randrange(1_000_000)
    )


def build(tenant_keys: list[str], *, seed: int = 6, per_day: dict[str, int] | None = None) -> Dataset:
    """Rows for each tenant key ("a", "b") over DAYS plus a few rows just outside the range."""
    rng = random.Random(seed)
    per_day = per_day or {"a": 120, "b": 25}
    ds = Dataset()
    for key in tenant_keys:
        senders = [f"did:decentrl:{key}{i}:zSig:zPre:did:web:{key}" for i in range(14)]
        for day in [DAYS[0] - timedelta(days=1), *DAYS, DAYS[-1] + timedelta(days=1)]:
            n = per_day[key] if day in DAYS else 3
            for _ in range(n):
                ctype = rng.choice(TYPES)
                ds.meters.append(
                    {
                        "tenant": key,
                        "at": _at(rng, day),
                        "transport": rng.choice(["http", "http", "ws"]),
                        "channel": "DIRECT_AUTHENTICATED" if ctype else "",
                        "protocol": "decentrl",
                        "command_type": ctype,
                        "code": rng.choice(CODES) if ctype else "INVALID_COMMAND",
                        "http_status": 200,
                        "bytes_in": rng.randrange(200, 5000),
                        "bytes_out": rng.randrange(40, 9000),
                        "duration_ms": round(rng.uniform(0.3, 80.0), 3),
                        "sender_did": rng.choice(senders[: 4 + rng.randrange(10)]) if ctype else "",
                    }
                )
            edge_rng = random.Random(f"{seed}-{key}-{day}")  # leaves `rng`'s sequence as it was
            midnight = datetime(day.year, day.month, day.day, tzinfo=UTC)
            for at in (midnight, midnight + timedelta(days=1, microseconds=-1))[:EDGES]:
                ds.meters.append(_edge_row(edge_rng, key, at))
            for _ in range(rng.randrange(1, 5)):
                ds.contracts.append({"tenant": key, "created_at": _at(rng, day), "registration": True})
            ds.contracts.append({"tenant": key, "created_at": _at(rng, day), "registration": False})
            for _ in range(rng.randrange(5, 15)):
                created = _at(rng, day)
                acked = created + timedelta(milliseconds=rng.randrange(5, 40_000_000)) if rng.random() < 0.75 else None
                ds.pending.append({"tenant": key, "created_at": created, "acknowledged_at": acked})
            for _ in range(rng.randrange(2, 9)):
                ds.stored.append(
                    {"tenant": key, "created_at": _at(rng, day), "payload_bytes": rng.randrange(10, 20_000)}
                )
    return ds


def _edge_row(rng: random.Random, key: str, at: datetime) -> dict:
    protocol = rng.choice(list(PROTOCOLS))
    return {
        "tenant": key,
        "at": at,
        "transport": "http",
        "channel": PROTOCOLS[protocol],
        "protocol": protocol,
        # A type that all three protocols share: the by-type table keeps them apart by protocol.
        "command_type": "QUERY_EVENTS",
        "code": rng.choice(CODES),
        "http_status": 200,
        "bytes_in": rng.randrange(200, 5000),
        "bytes_out": rng.randrange(40, 9000),
        "duration_ms": round(rng.uniform(0.3, 80.0), 3),
        "sender_did": "",
    }


def write_orm(ds: Dataset, tenants: dict) -> None:
    """Insert through the ORM; auto_now_add timestamps are then set with UPDATEs."""
    from apps.messaging.models import Contract, PendingEvent, StoredEvent
    from apps.usage.models import CommandMeter

    CommandMeter.objects.bulk_create(
        [CommandMeter(tenant=tenants[m["tenant"]], **{k: v for k, v in m.items() if k != "tenant"}) for m in ds.meters]
    )
    for i, c in enumerate(ds.contracts):
        t = tenants[c["tenant"]]
        who = f"did:decentrl:reg{i}:zSig:zPre:{t.did}"
        obj = Contract.objects.create(
            tenant=t,
            owner_did=who,
            requestor_did=who,
            recipient_did=t.did if c["registration"] else "did:decentrl:other:zS:zP:did:web:x",
            expires_at=2_000_000_000,
            contract_hash=f"{i:064x}",
            signed_contract="{}",
        )
        Contract.objects.filter(pk=obj.pk).update(created_at=c["created_at"])
    for p in ds.pending:
        obj = PendingEvent.objects.create(
            tenant=tenants[p["tenant"]], recipient_did="did:r", sender_did="did:s", payload="", payload_bytes=10
        )
        PendingEvent.objects.filter(pk=obj.pk).update(created_at=p["created_at"], acknowledged_at=p["acknowledged_at"])
    for s in ds.stored:
        obj = StoredEvent.objects.create(
            tenant=tenants[s["tenant"]],
            owner_did="did:o",
            sender_did="did:o",
            recipient_did="did:r",
            timestamp=1,
            payload="x",
            payload_bytes=s["payload_bytes"],
        )
        StoredEvent.objects.filter(pk=obj.pk).update(created_at=s["created_at"])


# The report's command latency percentiles are at most this factor above the exact nearest-rank
# value, never below it (spark_reports/transform.py: one latency bucket).
LATENCY_RATIO = math.exp(1 / LATENCY_BUCKETS_PER_E)
# Percentiles read off a latency histogram (commands, and pending events delivered): within its bound.
LATENCY_COLUMNS = ("latency_p50_ms", "latency_p95_ms", "delivery_p50_ms", "delivery_p95_ms")


def latency_within_bound(got: float | None, exact: float | None) -> bool:
    """The reported command latency percentile against the exact nearest-rank one."""
    if exact is None or got is None:
        return got is exact
    exact = float(exact)  # PostgreSQL's numeric (a delivery time) or float
    return exact - 1e-9 <= got < exact * LATENCY_RATIO + 1e-9


def nearest_rank(values: list[float], q: float) -> float | None:
    """The smallest value with at least q of the data at or below it (what percentile_disc returns)."""
    if not values:
        return None
    ordered = sorted(values)
    return ordered[max(0, math.ceil(q * len(ordered)) - 1)]


def expected_daily(ds: Dataset, first: date, last: date) -> dict:
    """Per (tenant key, day) figures computed in plain Python."""
    out: dict = {}

    def entry(key, day):
        return out.setdefault((key, day), {})

    groups: dict = {}
    for m in ds.meters:
        d = m["at"].date()
        if first <= d <= last:
            groups.setdefault((m["tenant"], d), []).append(m)
    for k, rows in groups.items():
        e = entry(*k)
        e["commands"] = len(rows)
        e["errors"] = sum(1 for r in rows if r["code"] not in NOT_ERRORS)
        e["bytes_in"] = sum(r["bytes_in"] for r in rows)
        e["bytes_out"] = sum(r["bytes_out"] for r in rows)
        e["latency_p50_ms"] = nearest_rank([r["duration_ms"] for r in rows], 0.5)
        e["latency_p95_ms"] = nearest_rank([r["duration_ms"] for r in rows], 0.95)
        e["active_identities"] = len({r["sender_did"] for r in rows if r["code"] in NOT_ERRORS and r["sender_did"]})
    for c in ds.contracts:
        d = c["created_at"].date()
        if c["registration"] and first <= d <= last:
            e = entry(c["tenant"], d)
            e["new_registrations"] = e.get("new_registrations", 0) + 1
    delays: dict = {}
    for p in ds.pending:
        d = p["created_at"].date()
        if first <= d <= last:
            e = entry(p["tenant"], d)
            e["pending_created"] = e.get("pending_created", 0) + 1
        if p["acknowledged_at"] is not None and first <= p["acknowledged_at"].date() <= last:
            ms = (p["acknowledged_at"] - p["created_at"]).total_seconds() * 1000
            delays.setdefault((p["tenant"], p["acknowledged_at"].date()), []).append(ms)
    for k, values in delays.items():
        e = entry(*k)
        e["pending_delivered"] = len(values)
        e["delivery_p50_ms"] = nearest_rank(values, 0.5)
        e["delivery_p95_ms"] = nearest_rank(values, 0.95)
    for s in ds.stored:
        d = s["created_at"].date()
        if first <= d <= last:
            e = entry(s["tenant"], d)
            e["stored_events"] = e.get("stored_events", 0) + 1
            e["stored_bytes"] = e.get("stored_bytes", 0) + s["payload_bytes"]
    return out
