"""An asyncio entry for `POST /`, measured before anyone builds it (issue 14 §2): the product's
TWO_WAY_PRIVATE command path, as faithfully as a probe can, on an event loop instead of a thread
per command.

    DATABASE_URL=… REDIS_URL=… python -m bench.async_entry_probe --port 8510 --interface rsgi
    … --no-push --no-observers --no-log    # the ladder: what each extra costs on the async path

Granian serves it (RSGI or ASGI, --interface; workers = cores by default, uvloop; or, to compare
servers, the same ASGI app on uvicorn, `--interface uvicorn`), Django is set up in every worker (DJANGO_SETTINGS_MODULE, the product's settings and AppConfig.ready wiring).
Per `POST /` it runs, in the order of apps/decentrl/wsgi.py CommandEntry and dispatch.handle:

1. the product's own pure or cached pieces, called, not copied: `tenant_for_host` (its per-process
   cache; a miss is one sync ORM query on the loop, once per MEDIATOR_TENANT_CACHE_SECONDS per
   host: DJANGO_ALLOW_ASYNC_UNSAFE is set for it), the body cap (DATA_UPLOAD_MAX_MEMORY_SIZE, then
   min(MEDIATOR_MAX_BODY_BYTES, tenant cap)), `forwarded_client`, hooks.PRE_CHECKS and
   SENDER_CHECKS (the rate limits: with a limit on, `ratelimit.hit` is a BLOCKING Redis script on
   the loop; the bench turns both limits off, as it does for production), `parse_command`,
   `dispatch.authenticate`, `dispatch.channel_checks`;
2. the timestamp window and dispatch.execute's steps for TWO_WAY_PRIVATE: ONE statement,
   `storage.deliver_statement` (the text and parameters PostgresStorage runs; tests hold it so),
   executed with prepare=True on a psycopg AsyncConnectionPool (autocommit), its row read by
   `storage.delivered`, the error in execute's order; a failed statement claims the nonce alone
   (storage.CLAIM) and answers 503, as PostgresStorage does;
3. the `Outcome` and its canonical reply, the same log line (LOG_LEVEL decides, as in production),
   hooks.OBSERVERS (metrics, and metering's buffer, which its own thread flushes as in production);
4. the push after the commit: redis.asyncio runs the same ZRANGEBYSCORE presence check as
   channels_redis_adapter.SyncSender.members on the channel layer's group key; only when the group
   has members is the message sent, by the sync adapter in a thread (the bench has no sockets);
5. the headers of `wsgi.response_headers` (security + CORS) and Content-Length.

What it leaves out: every other channel is handed to the product's sync `dispatch.execute` in a
thread (correct, not measured here); a DatabaseError of the tenant lookup or a did:web lookup is
answered 503 as the product does, but on the loop's blocking call; request_started/finished
(Django's connection handling: the probe's database work is on its own pool); the insecure-request
redirect and PREPEND_WWW / DISALLOWED_USER_AGENTS hand-offs of ProtocolWSGIApplication (the probe
answers only `POST /`, 404 otherwise, and /health). QUERY_EVENTS is not served asynchronously.
Bench only: the product's entry stays apps/decentrl/wsgi.py.
"""

from __future__ import annotations

import argparse
import asyncio
import logging
import os
import sys
import time
import traceback
import uuid

os.environ.setdefault("DJANGO_SETTINGS_MODULE", "mediator_project.settings")

import django  # noqa: E402

django.setup()

import psycopg  # noqa: E402
import redis.asyncio as aioredis  # noqa: E402
from channels.layers import get_channel_layer  # noqa: E402
from django.conf import settings  # noqa: E402
from django.db import DatabaseError  # noqa: E402
from django.utils import timezone  # noqa: E402
from psycopg.conninfo import make_conninfo  # noqa: E402
from psycopg_pool import AsyncConnectionPool  # noqa: E402

from apps.decentrl import dispatch, hooks  # noqa: E402
from apps.decentrl.dispatch import _ANYBODYS, Needed, Outcome, authenticate, channel_checks  # noqa: E402
from apps.decentrl.storage import CLAIM, NonceClaim, deliver_statement, delivered  # noqa: E402
from apps.decentrl.wsgi import response_headers  # noqa: E402
from apps.ops.clientip import forwarded_client  # noqa: E402
from apps.realtime.channels_redis_adapter import is_redis_layer, sync_sender  # noqa: E402
from apps.realtime.groups import group_name  # noqa: E402
from apps.realtime.push import PUSH_TYPE  # noqa: E402
from apps.tenants.selectors import tenant_for_host  # noqa: E402
from apps.wire.canonical import canonical_bytes, canonical_str  # noqa: E402
from apps.wire.envelope import TWO_WAY_PRIVATE, parse_command  # noqa: E402
from apps.wire.errors import ErrorCode, ProtocolError, error_body  # noqa: E402

log = logging.getLogger("mediator.command")
_JSON = ("Content-Type", "application/json")
PUSH = os.environ.get("PROBE_PUSH", "1") == "1"
OBSERVE = os.environ.get("PROBE_OBSERVERS", "1") == "1"
LOG = os.environ.get("PROBE_LOG", "1") == "1"


class Probe:
    """One per worker process: its connection pool and Redis client, opened on first use on the
    worker's loop."""

    def __init__(self) -> None:
        self.pool: AsyncConnectionPool | None = None
        self.redis = None
        self._lock: asyncio.Lock | None = None

    async def ready(self) -> None:
        if self.pool is not None:
            return
        if self._lock is None:
            self._lock = asyncio.Lock()
        async with self._lock:
            if self.pool is not None:
                return
            size = int(os.environ.get("PROBE_POOL_SIZE", "8"))
            db = settings.DATABASES["default"]
            conninfo = make_conninfo(
                dbname=db["NAME"], user=db.get("USER") or None, password=db.get("PASSWORD") or None,
                host=db.get("HOST") or None, port=db.get("PORT") or None,
            )  # fmt: skip
            pool = AsyncConnectionPool(
                conninfo,
                min_size=size,
                max_size=size,
                kwargs={"autocommit": True},
                open=False,
            )
            await pool.open(wait=True)
            layer = get_channel_layer()
            if PUSH and is_redis_layer(layer):
                self.layer = layer
                self.redis = [aioredis.from_url(h["address"]) for h in layer.hosts]
            self.pool = pool

    async def fetchone(self, sql: str, params: list):
        async with self.pool.connection() as conn:
            cur = await conn.execute(sql, params, prepare=True)
            return await cur.fetchone()

    async def push(self, tenant_id: int, did: str, message: dict) -> None:
        """push.push_to_sockets for channels_redis: the presence check on the loop."""
        if self.redis is None:
            return
        layer = self.layer
        group = group_name(tenant_id, did)
        try:
            members = await self.redis[layer.consistent_hash(group)].zrangebyscore(
                layer._group_key(group), f"({int(time.time()) - layer.group_expiry}", "+inf"
            )
            if members:
                names = [m.decode("utf8") for m in members]
                msg = {"type": PUSH_TYPE, "group": group, "text": canonical_str(message)}
                await asyncio.to_thread(sync_sender(layer).send, group, names, msg)
        except Exception:  # noqa: BLE001 - a push is a wake-up; never the message in the log
            log.exception("push to channel layer failed tenant_id=%s", tenant_id)

    async def execute(self, tenant, cmd, failure, now_ms: int) -> dict:
        """dispatch.execute for TWO_WAY_PRIVATE, its statement on the async pool."""
        h = cmd.header
        window = settings.MEDIATOR_TIMESTAMP_WINDOW_MS
        if abs(now_ms - h.timestamp) > window:
            raise ProtocolError(ErrorCode.TIMESTAMP_OUT_OF_RANGE)
        nonce = NonceClaim(
            tenant_id=tenant.pk,
            sender_did=h.sender_did,
            nonce=h.nonce,
            expires_at_ms=h.timestamp + window,
            now_ms=now_ms,
        )
        needed = Needed(None, ErrorCode.UNAUTHORIZED_COMMAND)
        if failure is None:
            try:
                needed = channel_checks(tenant, cmd)
            except (ProtocolError, DatabaseError) as exc:
                failure = exc
        if isinstance(failure, DatabaseError):
            if await self.fetchone(CLAIM, nonce.params()) is None:
                raise ProtocolError(ErrorCode.DUPLICATE_NONCE)
            raise failure
        public_id = uuid.uuid4()
        sql, params = deliver_statement(
            nonce,
            tenant=tenant,
            checks_passed=failure is None,
            sender_did=h.sender_did,
            recipient_did=h.recipient_did,
            payload=cmd.payload,
            now_s=now_ms // 1000,
            public_id=public_id,
        )
        try:
            found = delivered(await self.fetchone(sql, params), public_id)
        except psycopg.Error:
            try:
                await self.fetchone(CLAIM, nonce.params())
            except psycopg.Error:
                pass
            raise
        if found.event_id is not None and found.may_have_socket and PUSH:
            await self.push(
                tenant.pk,
                h.recipient_did,
                {"type": "PENDING_EVENTS", "events": [{"id": found.event_id, "sender_did": h.sender_did,
                                                        "payload": cmd.payload}]},
            )  # fmt: skip
        if not found.nonce_fresh:
            raise ProtocolError(ErrorCode.DUPLICATE_NONCE)
        if failure is not None:
            raise failure
        if needed.did is not None and not found.registered:
            raise ProtocolError(needed.missing)
        if not found.has_contract:
            raise ProtocolError(ErrorCode.COMMUNICATION_CONTRACT_NOT_FOUND)
        if found.queue_full:
            raise ProtocolError(ErrorCode.RECIPIENT_QUEUE_FULL)
        return {"type": "SUCCESS", "pendingEventId": found.event_id}

    async def handle(self, raw: bytes, tenant, remote_addr: str | None) -> tuple[Outcome, bytes]:
        """dispatch.handle, async (same order, same outcome, same log line and observers)."""
        started = time.perf_counter()
        meta = hooks.RequestMeta(transport="http", remote_addr=remote_addr, bytes_in=len(raw))
        cmd = None
        verified = False
        try:
            if tenant is None:
                raise ProtocolError(ErrorCode.UNKNOWN_MEDIATOR)
            if not tenant.is_active:
                raise ProtocolError(ErrorCode.MEDIATOR_UNAVAILABLE)
            if len(raw) > min(settings.MEDIATOR_MAX_BODY_BYTES, tenant.max_body_bytes):
                raise ProtocolError(ErrorCode.PAYLOAD_TOO_LARGE)
            for check in hooks.PRE_CHECKS:
                check(tenant, meta)
            cmd = parse_command(raw)
            failure = authenticate(cmd)
            verified = failure is None
            for sender_check in hooks.SENDER_CHECKS:
                sender_check(tenant, cmd, meta, verified)
            now_ms = int(time.time() * 1000)
            if cmd.header.channel == TWO_WAY_PRIVATE:
                body = await self.execute(tenant, cmd, failure, now_ms)
            else:
                body = await asyncio.to_thread(dispatch.execute, tenant, cmd, failure, "http", now_ms)
            outcome = Outcome(200, body, cmd.type, cmd.header.sender_did, channel=cmd.header.channel)
        except ProtocolError as err:
            outcome = Outcome(
                err.status,
                err.body(),
                cmd.type if cmd else None,
                cmd.header.sender_did if cmd and verified and err.code not in _ANYBODYS else None,
                err.code.value,
                err.retry_after,
                cmd.header.channel if cmd else None,
            )
        except Exception as exc:  # noqa: BLE001 - never a 500
            log.error(
                "%s while handling a command: %s at %s",
                "database error" if isinstance(exc, DatabaseError | psycopg.Error) else "unexpected error",
                type(exc).__name__,
                " <- ".join(f"{f.filename}:{f.lineno} {f.name}" for f in reversed(traceback.extract_tb(exc.__traceback__))),
            )  # fmt: skip
            outcome = Outcome(
                503,
                {"type": "ERROR", "code": ErrorCode.MEDIATOR_UNAVAILABLE.value},
                cmd.type if cmd else None,
                cmd.header.sender_did if cmd and verified else None,
                ErrorCode.MEDIATOR_UNAVAILABLE.value,
            )
        reply = outcome.body_bytes()
        elapsed_ms = (time.perf_counter() - started) * 1000
        slug = tenant.slug if tenant else "-"
        if LOG:
            log.info(
                "command tenant=%s transport=%s type=%s code=%s status=%s ms=%.1f",
                slug, "http", outcome.command_type or "-", outcome.code, outcome.status, elapsed_ms,
                extra={"tenant": slug, "transport": "http", "command": outcome.command_type or "-",
                       "code": outcome.code, "status": outcome.status, "duration_ms": round(elapsed_ms, 2)},
            )  # fmt: skip
        if OBSERVE and hooks.OBSERVERS:
            record = hooks.CommandRecord(
                tenant_id=tenant.pk if tenant else None,
                tenant_slug=tenant.slug if tenant else None,
                at=timezone.now(),
                transport="http",
                channel=outcome.channel,
                command_type=outcome.command_type,
                code=outcome.code,
                http_status=outcome.status,
                bytes_in=len(raw),
                bytes_out=len(reply),
                duration_ms=elapsed_ms,
                sender_did=outcome.sender_did,
                remote_addr=remote_addr,
            )
            for observer in hooks.OBSERVERS:
                try:
                    observer(record)
                except Exception:  # noqa: BLE001
                    log.exception("command observer failed")
        return outcome, reply

    async def command(self, environ: dict, length: int, read) -> tuple[int, list, bytes]:
        """CommandEntry._reply + dispatch.http_reply; `environ` holds the few keys they read."""
        await self.ready()
        try:
            tenant = tenant_for_host(environ.get("HTTP_HOST") or "")
        except DatabaseError:
            return 503, [_JSON], b'{"type": "ERROR", "code": "MEDIATOR_UNAVAILABLE"}'
        cap = settings.DATA_UPLOAD_MAX_MEMORY_SIZE
        if cap is not None and length > cap:
            return 413, [_JSON], canonical_bytes(error_body(ErrorCode.PAYLOAD_TOO_LARGE))
        raw = await read()
        client = forwarded_client(environ.get("REMOTE_ADDR"), environ.get("HTTP_X_FORWARDED_FOR"))
        outcome, reply = await self.handle(raw, tenant, client)
        if outcome.retry_after is None:
            return outcome.status, [_JSON], reply
        return outcome.status, [_JSON, ("Retry-After", str(outcome.retry_after))], reply

    async def reply(self, method: str, path: str, environ: dict, length: int, read) -> tuple[int, list, bytes]:
        if path == "/health":
            return 200, [("Content-Type", "text/plain")], b"ok"
        if method != "POST" or path != "/":
            return 404, [("Content-Type", "text/plain")], b"not served by the probe"
        try:
            status, headers, body = await self.command(environ, length, read)
        except Exception as exc:  # noqa: BLE001 - never a 500
            log.error("unexpected error in the probe entry: %s", type(exc).__name__)
            status, headers, body = 503, [_JSON], canonical_bytes(error_body(ErrorCode.MEDIATOR_UNAVAILABLE))
        return status, [*headers, ("Content-Length", str(len(body))), *response_headers(environ)], body


_probe = Probe()


def _environ(get, scheme: str, peer: str | None) -> dict:
    environ = {"wsgi.url_scheme": scheme, "REMOTE_ADDR": peer}
    for name, key in (("host", "HTTP_HOST"), ("origin", "HTTP_ORIGIN"), ("x-forwarded-for", "HTTP_X_FORWARDED_FOR"),
                      ("x-forwarded-proto", "HTTP_X_FORWARDED_PROTO")):  # fmt: skip
        if (v := get(name)) is not None:
            environ[key] = v
    return environ


def _length(value) -> int:
    try:
        return int(value or 0)
    except (TypeError, ValueError):
        return 0


class RSGIApp:
    """Granian's RSGI interface."""

    def __rsgi_init__(self, loop) -> None:
        pass

    async def __rsgi__(self, scope, proto) -> None:
        get = scope.headers.get
        peer = scope.client.rsplit(":", 1)[0] if scope.client else None
        environ = _environ(get, scope.scheme, peer)
        status, headers, body = await _probe.reply(
            scope.method, scope.path, environ, _length(get("content-length")), proto
        )
        proto.response_bytes(status, headers, body)


async def asgi_app(scope, receive, send) -> None:
    """Granian's ASGI interface."""
    if scope["type"] == "lifespan":
        while True:
            msg = await receive()
            if msg["type"] == "lifespan.startup":
                await send({"type": "lifespan.startup.complete"})
            elif msg["type"] == "lifespan.shutdown":
                await send({"type": "lifespan.shutdown.complete"})
                return
    hdrs = {k.decode("latin-1"): v.decode("latin-1") for k, v in scope["headers"]}

    async def read() -> bytes:
        chunks = []
        while True:
            msg = await receive()
            chunks.append(msg.get("body", b""))
            if not msg.get("more_body"):
                return b"".join(chunks)

    peer = scope["client"][0] if scope.get("client") else None
    environ = _environ(hdrs.get, scope.get("scheme", "http"), peer)
    status, headers, body = await _probe.reply(
        scope["method"], scope["path"], environ, _length(hdrs.get("content-length")), read
    )
    await send({"type": "http.response.start", "status": status,
                "headers": [(k.encode("latin-1"), v.encode("latin-1")) for k, v in headers]})  # fmt: skip
    await send({"type": "http.response.body", "body": body})


rsgi_app = RSGIApp()


def main(argv: list[str] | None = None) -> None:
    from granian import Granian
    from granian.constants import HTTPModes, Interfaces, Loops

    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--port", type=int, required=True)
    ap.add_argument("--interface", choices=["rsgi", "asgi", "uvicorn"], default="rsgi",
                    help="Granian's RSGI or ASGI; uvicorn: the same ASGI app on uvicorn (the lean reference's server)")  # fmt: skip
    ap.add_argument("--workers", type=int, default=os.cpu_count() or 1)
    ap.add_argument("--pool-size", type=int, default=8, help="PostgreSQL connections per worker")
    ap.add_argument("--no-push", action="store_true", help="ladder: skip the after-commit presence check")
    ap.add_argument("--no-observers", action="store_true", help="ladder: skip metering and metrics")
    ap.add_argument("--no-log", action="store_true", help="ladder: skip the per-command log call")
    args = ap.parse_args(argv)
    # Read by every worker at import (Granian imports the target anew in each process). The tenant
    # cache's rare miss is a sync ORM query on the loop (see the docstring): allowed in the server
    # only, never in a process that merely imports this module (tests).
    os.environ["DJANGO_ALLOW_ASYNC_UNSAFE"] = "true"
    os.environ.update({"PROBE_POOL_SIZE": str(args.pool_size), "PROBE_PUSH": "0" if args.no_push else "1",
                       "PROBE_OBSERVERS": "0" if args.no_observers else "1", "PROBE_LOG": "0" if args.no_log else "1"})  # fmt: skip
    target = "bench.async_entry_probe:" + ("rsgi_app" if args.interface == "rsgi" else "asgi_app")
    if args.interface == "uvicorn":
        import uvicorn

        uvicorn.run(target, host="127.0.0.1", port=args.port, workers=args.workers, loop="uvloop", http="httptools",
                    ws="none", lifespan="off", access_log=False, log_level="warning")  # fmt: skip
        return
    Granian(
        target, address="127.0.0.1", port=args.port, interface=Interfaces(args.interface), workers=args.workers,
        loop=Loops.uvloop, http=HTTPModes.http1, websockets=False, log_access=False,
    ).serve()  # fmt: skip


if __name__ == "__main__":
    main(sys.argv[1:])
