"""Nonce consumption: one INSERT … ON CONFLICT in its own autocommit statement.

The pair is committed before any command processing and stays consumed whatever happens after
(PROTOCOL-DECISIONS §3). A pair whose record has expired may be reused: the conflict branch only
refreshes rows past their expiry, so a live duplicate inserts/updates nothing and returns no row.
"""

from __future__ import annotations

from apps.messaging.fastpath import prepared_cursor
from apps.ops.jobs import Job

from .models import Nonce

_TABLE = Nonce._meta.db_table


def nonce_claim_sql(
    *, tenant_id: int, sender_did: str, nonce: str, expires_at_ms: int, now_ms: int
) -> tuple[str, list]:
    """The claiming INSERT … ON CONFLICT and its parameters: it returns a row only for a fresh pair.

    Also used as the first CTE of the TWO_WAY_PRIVATE fast path (apps/messaging/fastpath.py).
    """
    sql = (
        f"INSERT INTO {_TABLE} (tenant_id, sender_did, nonce, expires_at) VALUES (%s, %s, %s, %s) "
        f"ON CONFLICT (tenant_id, sender_did, nonce) DO UPDATE SET expires_at = EXCLUDED.expires_at "
        f"WHERE {_TABLE}.expires_at < %s RETURNING id"
    )
    return sql, [tenant_id, sender_did, nonce, expires_at_ms, now_ms]


def nonce_consume(*, tenant_id: int, sender_did: str, nonce: str, expires_at_ms: int, now_ms: int) -> bool:
    """True if the (nonce, sender) pair was fresh and is now consumed; False on a replay."""
    sql, params = nonce_claim_sql(
        tenant_id=tenant_id, sender_did=sender_did, nonce=nonce, expires_at_ms=expires_at_ms, now_ms=now_ms
    )
    # The unique constraint is the lock: concurrent inserts of one pair serialise on it and
    # exactly one gets a row back. Dispatch runs in autocommit, so this one statement commits by
    # itself (no BEGIN/COMMIT round trips on the hot path); inside a caller's atomic block it
    # would share that block's fate, which dispatch never does. Prepared on PostgreSQL (every
    # command runs it; client-side binding re-planned it each time).
    with prepared_cursor() as cur:
        cur.execute(sql, params)
        return cur.fetchone() is not None


def nonces_prune(*, now_ms: int, tenant=None, dry_run: bool = False) -> int:
    """Delete (or count) expired nonces, of every tenant or one (DCTRL-0004 §5.3); safe to run concurrently.

    A pair is kept until `timestamp + window` inclusive (docs/protocol-notes.md §3): only rows
    strictly past their expiry go.
    """
    qs = Nonce.objects.filter(expires_at__lt=now_ms)
    if tenant is not None:
        qs = qs.filter(tenant=tenant)
    return qs.count() if dry_run else qs.delete()[0]


def nonce_count() -> int:
    """Rows in the replay store, every tenant (the /metrics gauge)."""
    return Nonce.objects.count()


def _prune_job(*, now, dry_run: bool, tenant) -> int:
    return nonces_prune(now_ms=int(now.timestamp() * 1000), tenant=tenant, dry_run=dry_run)


# Registered with the maintenance jobs (apps.ops.jobs) by DecentrlConfig.ready().
PRUNE_JOB = Job("prune_nonces", "nonces", "pruned", _prune_job, "nonces")
