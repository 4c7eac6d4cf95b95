"""A framework-free reference server for TWO_WAY_PRIVATE and QUERY_EVENTS by one tag (issue 14), and for
DIDComm v2 forwards (issue 15): what plain Python does for the same messages on the same PostgreSQL
schema, to measure the production layout against.

    DATABASE_URL=postgresql://… python -m bench.lean_reference --port 8310 --workers 2

A raw ASGI callable on uvicorn (uvloop, httptools) with an asyncpg pool; no Django. Per `POST /` it
does the work the product does for TWO_WAY_PRIVATE (apps/decentrl/dispatch.py `handle` and
`storage.PostgresStorage`, apps/decentrl/storage.py), in the same order and with the same answers:

1. the tenant from the Host header (domain, alias, host without :80/:443), cached per process for
   MEDIATOR_TENANT_CACHE_SECONDS (default 5) as apps/tenants/selectors.py does; unknown host
   UNKNOWN_MEDIATOR, suspended tenant MEDIATOR_UNAVAILABLE, body over
   min(MEDIATOR_MAX_BODY_BYTES, the tenant's cap) PAYLOAD_TOO_LARGE;
2. `parse_command` of the product's pure protocol library (apps/wire: strict JSON, the
   envelope's schema), then the timestamp window (MEDIATOR_TIMESTAMP_WINDOW_MS);
3. the CPU checks, remembered and not answered: sender DID, signing key id, Ed25519 signature over
   the canonical JSON of the received header and payload (PyNaCl, `wire.crypto`), recipient DID;
4. ONE statement, the product's own text (`STATEMENT`, held equal to what the product executes by
   tests/test_bench_lean_reference.py): nonce claim, registration, contract and queue-cap checks,
   the insert and the recipient's presence read under its lock, prepared per connection
   (asyncpg's statement cache);
5. the error in protocol order (DUPLICATE_NONCE, the remembered CPU error,
   RECIPIENT_NOT_REGISTERED, COMMUNICATION_CONTRACT_NOT_FOUND, RECIPIENT_QUEUE_FULL) or
   `{"type":"SUCCESS","pendingEventId":…}`, as the product's canonical JSON bytes. If the statement
   fails, the nonce is claimed on its own and the answer is 503 MEDIATOR_UNAVAILABLE, as in the
   product.

QUERY_EVENTS (DIRECT_AUTHENTICATED) by exactly one tag, without time bounds, within the tenant's page
cap, goes the same way: the sender's signature (deferred as above), the recipient must be the
tenant's DID (UNAUTHORIZED_COMMAND), then ONE statement, the product's text again (`QE_STATEMENT`:
the claim, the sender's registration and the page with its window count), the error in protocol
order (DUPLICATE_NONCE, the remembered CPU error, UNAUTHORIZED_COMMAND for an unregistered sender),
then `{"type":"SUCCESS","payload":{"events":[…],"pagination":{…}}}` in canonical JSON; an empty
page past the end takes the product's COUNT. Any other filter shape or command is INVALID_COMMAND
before the nonce (the reference does not serve it).

`POST /didcomm` serves DIDComm v2 routing/2.0 forwards (issue 15 §7), anoncrypt to the tenant's
current mediator DID, as apps/didcomm/dispatch.py and services.forward_store do them: the tenant,
its DIDComm policy (enabled), the size and media type, the envelope parsed once and decrypted with
the mediator DID's X25519 key (apps/didcomm/core, the product's own JWE code; the key unsealed
once per process with the deployment key, apps/tenants/keystore.py), the plaintext message and the
forward's body checks, then ONE statement, the product's text again (`FORWARD_STATEMENT`: the
recipient found and locked, the queue cap, the insert, the presence read), and 202 with no body;
the problem reports (plaintext, as the product answers an anonymous sender) carry the product's
codes, comments, statuses and `pthid`. It does not serve what the benchmark does not send: an
authcrypt, nested or signed forward, a kid other than the mediator DID's `#key-2`, a retired DID
in its grace period, any other message type, or a tenant whose DIDComm policy and identity the
product has not made yet (they are made on first use): those are refused with a problem report.

What it leaves out, on purpose (so the comparison shows what they cost, docs/benchmark-history.md "Lean
reference"): usage metering and metrics (the command observers), the after-commit push to
`/ws` sockets (which the product leaves out too when the statement says the recipient has none,
as in the benchmark), the per-command log line, rate limits and CORS (for forwards too: metering, the forward counters,
the wake of a live recipient, the per-IP limit).
Other channels and commands are answered INVALID_COMMAND, and only
did:decentrl DIDs resolve: a did:web sender or recipient (a tenant itself) is SENDER_NOT_FOUND or
RECIPIENT_NOT_FOUND here, where the product looks it up. Bench only: not part of the product, and
its dependencies (uvicorn, uvloop, httptools, asyncpg) are in requirements-dev.txt.
"""

from __future__ import annotations

import argparse
import functools
import json
import os
import time
import uuid
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta

import asyncpg

from apps.didcomm.core import jwe
from apps.didcomm.core.errors import DidcommError
from apps.didcomm.core.keys import X25519, PrivateKey
from apps.didcomm.core.message import ENCRYPTED, PLAINTEXT, PlainMessage, envelope_kind, parse_plaintext
from apps.didcomm.problems import problem_message, pthid_of
from apps.didcomm.protocols import FORWARD, Code
from apps.didcomm.recipients import did_hash, lookup_form
from apps.tenants import keystore
from apps.wire.canonical import canonical_bytes
from apps.wire.crypto import verify_json_object
from apps.wire.did import DidError, ResolvedDid, parse_decentrl
from apps.wire.envelope import DIRECT_AUTHENTICATED, TWO_WAY_PRIVATE, Command, QueryEvents, parse_command
from apps.wire.errors import ErrorCode, ProtocolError, error_body

# apps/decentrl/storage.py CLAIM as the first CTE, then the TWO_WAY_PRIVATE body,
# with psycopg's %s numbered as $1…$30 in order (the test compares it with what the product runs).
STATEMENT = """WITH claim AS (INSERT INTO protocol_nonce (tenant_id, sender_did, nonce, expires_at) VALUES ($1, $2, $3, $4) ON CONFLICT (tenant_id, sender_did, nonce) DO UPDATE SET expires_at = EXCLUDED.expires_at WHERE protocol_nonce.expires_at < $5 RETURNING id)
, chk AS (
    SELECT c.fresh,
        CASE WHEN c.fresh AND $6 THEN EXISTS(SELECT 1 FROM messaging_contract WHERE tenant_id = $7 AND owner_did = $8 AND requestor_did = $9 AND recipient_did = $10 AND expires_at > $11) ELSE false END AS registered,
        CASE WHEN c.fresh AND $12 THEN EXISTS(SELECT 1 FROM messaging_contract WHERE tenant_id = $13 AND owner_did = $14 AND expires_at > $15 AND ((requestor_did = $16 AND recipient_did = $17) OR (requestor_did = $18 AND recipient_did = $19))) ELSE false END AS has_contract,
        CASE WHEN c.fresh AND $20 AND $21 > 0 THEN COALESCE((
            SELECT depth >= $22 FROM messaging_pendingqueuedepth WHERE tenant_id = $23 AND recipient_did = $24
            ), false) ELSE false END AS queue_full
    FROM (SELECT EXISTS(SELECT 1 FROM claim) AS fresh) c
), ins AS (
    INSERT INTO messaging_pendingevent (public_id, tenant_id, recipient_did, sender_did, payload, payload_bytes, created_at)
    SELECT $25, $26, $27, $28, $29, $30, now() FROM chk
    WHERE chk.registered AND chk.has_contract AND NOT chk.queue_full
    RETURNING id
)
SELECT chk.fresh, chk.registered, chk.has_contract, chk.registered AND chk.has_contract AND chk.queue_full,
    EXISTS(SELECT 1 FROM ins), CASE WHEN EXISTS(SELECT 1 FROM ins) THEN (SELECT live > 0 AND live_until > $31 FROM messaging_pendingqueuedepth WHERE tenant_id = $32 AND recipient_did = $33 FOR UPDATE) END
FROM chk
"""
# The claim alone (apps/decentrl/storage.py, the claim alone), for the 503 after a failed statement.
CLAIM = STATEMENT[len("WITH claim AS (") : STATEMENT.index(")\n, chk AS")]

# QUERY_EVENTS by one tag: apps/decentrl/storage.py's claim, the sender's registration and
# apps/messaging/eventquery.py's page for that shape in one statement, numbered $1…$17 (the test
# compares it with what the product runs).
QE_STATEMENT = (
    f"WITH claim AS ({CLAIM}), chk AS MATERIALIZED (SELECT c.fresh, CASE WHEN c.fresh THEN EXISTS(SELECT 1"
    " FROM messaging_contract WHERE tenant_id = $6 AND owner_did = $7 AND requestor_did = $8 AND recipient_did = $9"
    " AND expires_at > $10) ELSE false END AS registered FROM (SELECT EXISTS(SELECT 1 FROM claim) AS fresh) c)"
    " SELECT chk.fresh, chk.registered, p.public_id, p.payload, p.encrypted_tags, p.timestamp, p.total FROM chk"
    " LEFT JOIN (SELECT * FROM (SELECT e.public_id::text AS public_id, e.payload, e.encrypted_tags, e.timestamp,"
    " page.total, page.event_id FROM (SELECT event_id, timestamp, count(*) OVER () AS total FROM (SELECT event_id,"
    " timestamp FROM messaging_eventtag WHERE messaging_eventtag.tenant_id = $11 AND messaging_eventtag.owner_did ="
    " $12 AND messaging_eventtag.tag = $13) matched ORDER BY timestamp, event_id LIMIT $14 OFFSET $15) page JOIN"
    " messaging_storedevent e ON e.id = page.event_id AND e.tenant_id = $16 AND e.owner_did = $17 ORDER BY"
    " page.timestamp, page.event_id) q WHERE (SELECT registered FROM chk)) p ON true ORDER BY p.timestamp, p.event_id"
)
# The product's `total` of an empty page past the end (eventquery.stored_events_count, one tag).
QE_COUNT = (
    "SELECT count(*) FROM messaging_eventtag WHERE messaging_eventtag.tenant_id = $1"
    " AND messaging_eventtag.owner_did = $2 AND messaging_eventtag.tag = $3"
)
MAX_PAGE_SIZE = 100

_TENANT_COLUMNS = "t.id, t.did, t.status, t.pending_queue_cap, t.max_body_bytes, t.max_page_size"
_TENANT_BY_DOMAIN = f"SELECT {_TENANT_COLUMNS} FROM tenants_tenant t WHERE t.domain = $1"
_TENANT_BY_ALIAS = (
    f"SELECT {_TENANT_COLUMNS} FROM tenants_tenantdomain d JOIN tenants_tenant t ON t.id = d.tenant_id "
    "WHERE d.domain = $1"
)


@dataclass(frozen=True)
class Tenant:
    id: int
    did: str
    active: bool
    pending_queue_cap: int
    max_body_bytes: int
    max_page_size: int | None = None


# apps/didcomm/storage.py FORWARD, with psycopg's %s numbered $1…$9 (the test compares it with what
# the product runs): the recipient found and locked, the queue cap, the insert, the presence read.
FORWARD_STATEMENT = (
    "SELECT o_outcome, o_evicted, o_client_did, o_outbound_id, o_live"
    " FROM didcomm_forward_store($1, $2, $3, $4, $5, $6, $7, $8, $9)"
)
# The tenant's DIDComm policy and current mediator identity (made by the product on first use).
_MEDIATOR = (
    "SELECT p.enabled, p.queue_cap, p.overflow, p.message_ttl_hours, i.did, i.key_ref::text,"
    " i.agreement_private_sealed, t.slug FROM didcomm_didcommpolicy p JOIN tenants_tenant t ON t.id = p.tenant_id"
    " JOIN didcomm_mediatoridentity i ON i.tenant_id = p.tenant_id AND i.retired_at IS NULL WHERE p.tenant_id = $1"
)
ENCRYPTED_MEDIA = "application/didcomm-encrypted+json"
_DIDCOMM_MEDIA = (ENCRYPTED_MEDIA, "application/json")
_compact_json = json.JSONEncoder(separators=(",", ":"), check_circular=False).encode


@dataclass(frozen=True)
class Mediator:
    """A tenant's DIDComm policy and its current mediator DID's key-agreement key, unsealed."""

    enabled: bool
    queue_cap: int
    reject: bool
    ttl: timedelta
    kid: str
    key: PrivateKey

    @classmethod
    def from_row(cls, row) -> Mediator:
        enabled, cap, overflow, ttl_hours, did, key_ref, sealed, slug = row
        secret = keystore.unseal(sealed, context=f"{slug}:didcomm-agreement:{key_ref}")
        return cls(enabled, cap, overflow == "reject", timedelta(hours=ttl_hours), f"{did}#key-2",
                   PrivateKey.from_secret(X25519, secret))  # fmt: skip


class DidcommProblem(Exception):
    """A Report Problem 2.0 answer (apps/didcomm/problems.Problem), with the message it concerns."""

    def __init__(self, code: str, comment: str, status: int = 400, message: PlainMessage | None = None):
        super().__init__(code)
        self.code, self.comment, self.status, self.message = code, comment, status, message

    def body(self) -> bytes:
        """apps/didcomm/dispatch's plaintext problem report (sender unknown: not encrypted)."""
        report = problem_message(self.code, self.comment, pthid=pthid_of(self.message))
        return json.dumps(report, separators=(",", ":")).encode("utf-8")


def unpack_forward(med: Mediator, raw: bytes) -> tuple[PlainMessage, str, dict]:
    """The CPU work of one anoncrypt routing/2.0 forward, in apps/didcomm/dispatch.py's order and
    with its answers: the envelope, its decryption with the mediator DID's key, the plaintext
    message, handlers.forward's body checks. Returns (message, `body.next`, the attachment data)."""
    try:
        obj = jwe.parse_envelope(raw)
        if envelope_kind(obj) != ENCRYPTED:
            raise DidcommProblem(Code.UNAUTHENTICATED, "messages to this mediator must be encrypted (JWE)")
        decrypted = jwe.decrypt(obj, private_key_for=lambda kid: med.key if kid == med.kid else None)
        inner = jwe.parse_envelope(decrypted.plaintext)
        if decrypted.sender_kid is not None or envelope_kind(inner) != PLAINTEXT:
            raise DidcommProblem(Code.MALFORMED, "the lean reference serves one anoncrypt layer only")
        message = parse_plaintext(inner)
    except DidcommError as exc:
        raise DidcommProblem(exc.problem_code, str(exc)) from exc
    if message.type != FORWARD:
        raise DidcommProblem(Code.UNSUPPORTED_TYPE, "the lean reference serves forwards only", message=message)
    next_did = message.body.get("next")
    if not isinstance(next_did, str) or not next_did:
        raise DidcommProblem(Code.BAD_BODY, "forward needs body.next", message=message)
    if not message.attachments or not isinstance(message.attachments[0].get("data"), dict):
        raise DidcommProblem(Code.BAD_BODY, "forward needs one attachment with data", message=message)
    data = message.attachments[0]["data"]
    if not (isinstance(data.get("json"), dict) or isinstance(data.get("base64"), str)):
        raise DidcommProblem(Code.BAD_BODY, "forward attachment data must be json or base64", message=message)
    return message, next_did, {k: data[k] for k in ("json", "base64") if k in data}


def forward_params(
    *, tenant_id: int, med: Mediator, lookup: str, data: dict, message_id: uuid.UUID, now: datetime
) -> list:
    """FORWARD_STATEMENT's parameters, as services.forward_store and storage.ForwardRequest make them."""
    return [
        tenant_id, did_hash(lookup), med.queue_cap, med.reject, message_id,
        _compact_json(data), now, now + med.ttl, isinstance(data.get("json"), dict),
    ]  # fmt: skip


def statement_params(
    *, tenant: Tenant, cmd: Command, checks_passed: bool, now_ms: int, window_ms: int, public_id: uuid.UUID
) -> list:
    """The 33 parameters of STATEMENT, in the order apps/decentrl/storage.py passes them."""
    h = cmd.header
    now_s = now_ms // 1000
    cap = tenant.pending_queue_cap or 0
    sender, recipient, payload = h.sender_did, h.recipient_did, cmd.payload
    return [
        tenant.id, sender, h.nonce, h.timestamp + window_ms, now_ms,  # claim
        checks_passed, tenant.id, recipient, recipient, tenant.did, now_s,  # registered
        checks_passed, tenant.id, recipient, now_s, sender, recipient, recipient, sender,  # has_contract
        checks_passed, cap, cap, tenant.id, recipient,  # queue_full
        public_id, tenant.id, recipient, sender, payload, len(payload.encode("utf-8")),  # ins
        now_s, tenant.id, recipient,  # the recipient's presence (read, locked; the reference pushes nothing)
    ]  # fmt: skip


def query_events_params(*, tenant: Tenant, cmd: Command, now_ms: int, window_ms: int) -> list:
    """The 17 parameters of QE_STATEMENT, in the order apps/decentrl/storage.py passes them."""
    h, body = cmd.header, cmd.body
    sender = h.sender_did
    return [
        tenant.id, sender, h.nonce, h.timestamp + window_ms, now_ms,  # claim
        tenant.id, sender, sender, tenant.did, now_ms // 1000,  # the sender's registration
        tenant.id, sender, body.filter.encrypted_tags[0], body.page.page_size, body.page.offset,  # the page
        tenant.id, sender,
    ]  # fmt: skip


def served_query(tenant: Tenant, cmd: Command) -> bool:
    """Whether the reference serves this QUERY_EVENTS: one distinct tag, no other filter, a page
    within the tenant's cap (what the product reads in its one statement)."""
    body = cmd.body
    if not isinstance(body, QueryEvents):
        return False
    f = body.filter
    one_tag = len(set(f.encrypted_tags)) == 1
    plain = f.after_timestamp is None and f.before_timestamp is None and f.participant_did is None
    cap = min(tenant.max_page_size or MAX_PAGE_SIZE, MAX_PAGE_SIZE)
    return one_tag and plain and not f.unprocessed_only and body.page.page_size <= cap


@functools.lru_cache(maxsize=8192)
def _resolve(did: str) -> ResolvedDid:
    """did:decentrl parses, cached as dispatch._resolve caches them; anything else DidError."""
    return parse_decentrl(did)


def sender_checks(cmd: Command) -> None:
    """DCTRL-0004 §6.2 steps 1-3 on the CPU: the sender's DID, key and signature."""
    h = cmd.header
    try:
        sender = _resolve(h.sender_did)
    except DidError as exc:
        raise ProtocolError(ErrorCode.SENDER_NOT_FOUND) from exc
    key = sender.signing_key_for(h.sender_signing_key_id)
    if key is None:
        raise ProtocolError(ErrorCode.SENDER_SIGNING_KEY_NOT_FOUND)
    if not verify_json_object(cmd.signable, cmd.signature, key):
        raise ProtocolError(ErrorCode.INVALID_SIGNATURE)


def cpu_checks(cmd: Command) -> None:
    """DCTRL-0004 §7.2 steps 1-4 on the CPU, as dispatch.execute checks them on the CPU."""
    sender_checks(cmd)
    h = cmd.header
    try:
        _resolve(h.recipient_did)
    except DidError as exc:
        raise ProtocolError(ErrorCode.RECIPIENT_NOT_FOUND) from exc


def direct_checks(tenant: Tenant, cmd: Command) -> None:
    """DCTRL-0004 §6.2 steps 1-4 on the CPU for a command to the mediator itself."""
    sender_checks(cmd)
    if cmd.header.recipient_did != tenant.did:
        raise ProtocolError(ErrorCode.UNAUTHORIZED_COMMAND)


_DB_ERRORS = (asyncpg.PostgresError, asyncpg.InterfaceError, OSError)


async def _claiming(conn, params: list, statement):
    """What the awaitable `statement` returns; when it fails, nothing of it committed: the nonce
    (`params[:5]`, the claim's) is claimed on its own before the 503, as the product does."""
    try:
        return await statement
    except _DB_ERRORS:
        try:
            await conn.fetchrow(CLAIM, *params[:5])
        except _DB_ERRORS:
            pass
        raise


async def _keep_session(conn) -> None:
    """Nothing to reset: the reference never changes session state or leaves a transaction open."""


class Reference:
    """The per-process state: the pool and the tenant cache."""

    def __init__(self, dsn: str, pool_size: int):
        self.dsn = dsn
        self.pool_size = pool_size
        self.pool: asyncpg.Pool | None = None
        self.window_ms = int(os.environ.get("MEDIATOR_TIMESTAMP_WINDOW_MS", "300000"))
        self.max_body = int(os.environ.get("MEDIATOR_MAX_BODY_BYTES", str(6 * 1024 * 1024)))
        self.tenant_ttl = float(os.environ.get("MEDIATOR_TENANT_CACHE_SECONDS", "5"))
        self._tenants: dict[str, tuple[Tenant | None, float]] = {}
        self._mediators: dict[int, tuple[Mediator | None, float]] = {}

    async def start(self) -> None:
        # A fixed set of persistent connections, as the HTTP tier's threads keep theirs: no reset
        # round trip on release (asyncpg's default sends `RESET ALL` etc. after every use), no
        # replacement after N queries or idle time, so each keeps its prepared statement.
        self.pool = await asyncpg.create_pool(
            self.dsn,
            min_size=self.pool_size,
            max_size=self.pool_size,
            reset=_keep_session,
            max_queries=2**62,
            max_inactive_connection_lifetime=0,
        )

    async def stop(self) -> None:
        if self.pool is not None:
            await self.pool.close()

    async def _lookup(self, conn, host: str) -> Tenant | None:
        row = await conn.fetchrow(_TENANT_BY_DOMAIN, host) or await conn.fetchrow(_TENANT_BY_ALIAS, host)
        if row is None:
            return None
        return Tenant(row[0], row[1], row[2] == "active", row[3], row[4], row[5])

    async def tenant_for_host(self, conn, host: str) -> Tenant | None:
        host = host.lower()
        now = time.monotonic()
        hit = self._tenants.get(host)
        if hit is not None and hit[1] > now:
            return hit[0]
        tenant = await self._lookup(conn, host)
        if tenant is None and ":" in host:
            name, _, port = host.rpartition(":")
            if port in ("80", "443"):
                tenant = await self._lookup(conn, name)
        if self.tenant_ttl > 0:
            if len(self._tenants) >= 1024:
                self._tenants.clear()
            self._tenants[host] = (tenant, now + self.tenant_ttl)
        return tenant

    async def command(self, host: str, raw: bytes) -> tuple[int, dict]:
        """(status, reply body) for one `POST /`."""
        async with self.pool.acquire() as conn:
            try:
                tenant = await self.tenant_for_host(conn, host)
                if tenant is None:
                    raise ProtocolError(ErrorCode.UNKNOWN_MEDIATOR)
                if not tenant.active:
                    raise ProtocolError(ErrorCode.MEDIATOR_UNAVAILABLE)
                if len(raw) > min(self.max_body, tenant.max_body_bytes):
                    raise ProtocolError(ErrorCode.PAYLOAD_TOO_LARGE)
                cmd = parse_command(raw)
                now_ms = int(time.time() * 1000)
                if cmd.header.channel == TWO_WAY_PRIVATE:
                    return 200, await self.two_way_private(conn, tenant, cmd, now_ms)
                if cmd.header.channel == DIRECT_AUTHENTICATED and served_query(tenant, cmd):
                    return 200, await self.query_events(conn, tenant, cmd, now_ms)
                raise ProtocolError(ErrorCode.INVALID_COMMAND, "the lean reference does not serve this command")
            except ProtocolError as err:
                return err.status, err.body()
            except _DB_ERRORS:
                return 503, error_body(ErrorCode.MEDIATOR_UNAVAILABLE)

    async def mediator_for(self, conn, tenant: Tenant) -> Mediator | None:
        now = time.monotonic()
        hit = self._mediators.get(tenant.id)
        if hit is not None and hit[1] > now:
            return hit[0]
        row = await conn.fetchrow(_MEDIATOR, tenant.id)
        med = Mediator.from_row(row) if row is not None else None
        if self.tenant_ttl > 0:
            self._mediators[tenant.id] = (med, now + self.tenant_ttl)
        return med

    async def didcomm(self, host: str, raw: bytes, content_type: str) -> tuple[int, bytes]:
        """(status, reply body) for one `POST /didcomm`: 202 and no body for a stored forward."""
        message = None
        async with self.pool.acquire() as conn:
            try:
                tenant = await self.tenant_for_host(conn, host)
                if tenant is None:
                    raise DidcommProblem(Code.UNKNOWN_MEDIATOR, "no mediator at this host", 404)
                if not tenant.active:
                    raise DidcommProblem(Code.UNAVAILABLE, "mediator suspended", 503)
                med = await self.mediator_for(conn, tenant)
                if med is None or not med.enabled:
                    raise DidcommProblem(Code.UNKNOWN_MEDIATOR, "DIDComm is not enabled on this mediator", 404)
                if len(raw) > tenant.max_body_bytes:
                    raise DidcommProblem(Code.TOO_BIG, "message too large", 413)
                if content_type.split(";", 1)[0].strip().lower() not in _DIDCOMM_MEDIA:
                    raise DidcommProblem(Code.UNSUPPORTED_MEDIA, f"use {ENCRYPTED_MEDIA}", 415)
                message, next_did, data = unpack_forward(med, raw)
                try:
                    lookup = lookup_form(next_did)
                except DidcommError:
                    lookup = None
                outcome = "unknown"
                if lookup is not None:
                    params = forward_params(tenant_id=tenant.id, med=med, lookup=lookup, data=data,
                                            message_id=uuid.uuid4(), now=datetime.now(UTC))  # fmt: skip
                    outcome = (await conn.fetchrow(FORWARD_STATEMENT, *params))[0]
                if outcome == "unknown":  # as services.forward_store: not a DID, or nobody mediates it
                    raise DidcommProblem(Code.NOT_FOUND, "Recipient not registered with this mediator", message=message)
                if outcome == "full":
                    raise DidcommProblem(Code.STORAGE_FULL, "recipient queue is full", 507, message=message)
                return 202, b""
            except DidcommProblem as problem:
                return problem.status, problem.body()
            except _DB_ERRORS:
                return 503, DidcommProblem(Code.UNAVAILABLE, "mediator unavailable", 503, message=message).body()

    def _checked(self, cmd: Command, now_ms: int, checks) -> ProtocolError | None:
        """The timestamp window (answered at once), then `checks(cmd)` on the CPU: their error is
        remembered, to be answered after the nonce (DCTRL-0004 §5.4, as dispatch.execute does)."""
        if abs(now_ms - cmd.header.timestamp) > self.window_ms:
            raise ProtocolError(ErrorCode.TIMESTAMP_OUT_OF_RANGE)
        try:
            checks(cmd)
        except ProtocolError as err:
            return err
        return None

    async def two_way_private(self, conn, tenant: Tenant, cmd: Command, now_ms: int) -> dict:
        deferred = self._checked(cmd, now_ms, cpu_checks)
        public_id = uuid.uuid4()
        params = statement_params(
            tenant=tenant,
            cmd=cmd,
            checks_passed=deferred is None,
            now_ms=now_ms,
            window_ms=self.window_ms,
            public_id=public_id,
        )
        row = await _claiming(conn, params, conn.fetchrow(STATEMENT, *params))
        fresh, registered, has_contract, queue_full, stored, _live = row
        if not fresh:
            raise ProtocolError(ErrorCode.DUPLICATE_NONCE)
        if deferred is not None:
            raise deferred
        if not registered:
            raise ProtocolError(ErrorCode.RECIPIENT_NOT_REGISTERED)
        if not has_contract:
            raise ProtocolError(ErrorCode.COMMUNICATION_CONTRACT_NOT_FOUND)
        if queue_full:
            raise ProtocolError(ErrorCode.RECIPIENT_QUEUE_FULL)
        assert stored
        return {"type": "SUCCESS", "pendingEventId": str(public_id)}

    async def query_events(self, conn, tenant: Tenant, cmd: Command, now_ms: int) -> dict:
        h = cmd.header
        deferred = self._checked(cmd, now_ms, functools.partial(direct_checks, tenant))
        params = query_events_params(tenant=tenant, cmd=cmd, now_ms=now_ms, window_ms=self.window_ms)
        if deferred is not None:  # the product claims the nonce alone after a failed CPU check
            claimed = await conn.fetchrow(CLAIM, *params[:5])
            rows = [(claimed is not None, False, None)]
        else:
            rows = await _claiming(conn, params, conn.fetch(QE_STATEMENT, *params))
        fresh, registered = rows[0][0], rows[0][1]
        if not fresh:
            raise ProtocolError(ErrorCode.DUPLICATE_NONCE)
        if deferred is not None:
            raise deferred
        if not registered:
            raise ProtocolError(ErrorCode.UNAUTHORIZED_COMMAND)
        page = [r for r in rows if r[2] is not None]
        body = cmd.body
        if page:
            total = page[0][6]
        elif body.page.offset == 0:
            total = 0
        else:
            total = await conn.fetchval(QE_COUNT, tenant.id, h.sender_did, body.filter.encrypted_tags[0])
        events = [{"id": r[2], "payload": r[3], "encrypted_tags": json.loads(r[4]), "timestamp": r[5]} for r in page]
        return {"type": "SUCCESS", "payload": {"events": events, "pagination": body.page.reply(total)}}


# What the product's SecurityMiddleware and XFrameOptionsMiddleware put on every reply (with the
# layout's settings), so that both servers send replies of the same size.
_STATIC_HEADERS = [
    (b"content-type", b"application/json"),
    (b"x-frame-options", b"DENY"),
    (b"x-content-type-options", b"nosniff"),
    (b"referrer-policy", b"same-origin"),
    (b"cross-origin-opener-policy", b"same-origin"),
]


async def _read_body(receive, limit: int) -> bytes | None:
    """The request body, or None once it passes `limit` bytes."""
    parts, size = [], 0
    while True:
        message = await receive()
        chunk = message.get("body", b"")
        size += len(chunk)
        if size > limit:
            return None
        parts.append(chunk)
        if not message.get("more_body"):
            return b"".join(parts)


async def _reply(send, status: int, body: bytes, headers=_STATIC_HEADERS) -> None:
    await send(
        {
            "type": "http.response.start",
            "status": status,
            "headers": [*headers, (b"content-length", str(len(body)).encode())],
        }
    )
    await send({"type": "http.response.body", "body": body})


def make_app(dsn: str, pool_size: int):
    """The ASGI callable: `POST /` commands, `GET /health`, 404 for anything else."""
    ref = Reference(dsn, pool_size)

    async def app(scope, receive, send):
        if scope["type"] == "lifespan":
            while True:
                message = await receive()
                if message["type"] == "lifespan.startup":
                    await ref.start()
                    await send({"type": "lifespan.startup.complete"})
                elif message["type"] == "lifespan.shutdown":
                    await ref.stop()
                    await send({"type": "lifespan.shutdown.complete"})
                    return
        if scope["type"] != "http":
            return
        if scope["method"] == "POST" and scope["path"] == "/":
            raw = await _read_body(receive, ref.max_body)
            if raw is None:
                status, body = 413, error_body(ErrorCode.PAYLOAD_TOO_LARGE)
            else:
                host = next((v.decode("latin-1") for k, v in scope["headers"] if k == b"host"), "")
                status, body = await ref.command(host, raw)
            await _reply(send, status, canonical_bytes(body))
        elif scope["method"] == "POST" and scope["path"] == "/didcomm":
            headers = dict(scope["headers"])
            raw = await _read_body(receive, ref.max_body)
            if raw is None:
                status, body = 413, DidcommProblem(Code.TOO_BIG, "message too large", 413).body()
            else:
                host = headers.get(b"host", b"").decode("latin-1")
                status, body = await ref.didcomm(host, raw, headers.get(b"content-type", b"").decode("latin-1"))
            await _reply(send, status, body, _STATIC_HEADERS if body else _STATIC_HEADERS[1:])
        elif scope["method"] == "GET" and scope["path"] == "/health":
            await _reply(send, 200, b'{"status":"ok"}')
        else:
            await _reply(send, 404, b"{}")

    return app


def app_from_env():
    """uvicorn's factory (`--factory`): the app for DATABASE_URL and LEAN_POOL_SIZE."""
    return make_app(os.environ["DATABASE_URL"], int(os.environ.get("LEAN_POOL_SIZE", "8")))


def main(argv: list[str] | None = None) -> None:
    import uvicorn

    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--host", default="127.0.0.1")
    ap.add_argument("--port", type=int, default=8310)
    ap.add_argument("--workers", type=int, default=os.cpu_count() or 1, help="processes (default: one per core)")
    ap.add_argument("--pool-size", type=int, default=8, help="PostgreSQL connections per process")
    args = ap.parse_args(argv)
    os.environ["LEAN_POOL_SIZE"] = str(args.pool_size)
    uvicorn.run(
        "bench.lean_reference:app_from_env",
        factory=True,
        host=args.host,
        port=args.port,
        workers=args.workers,
        loop="uvloop",
        http="httptools",
        lifespan="on",
        access_log=False,
        log_level="warning",
    )


if __name__ == "__main__":
    main()
