"""Push wake-ups (issue 43, docs/push.md) on the production layout with its real Celery worker.

    .venv/bin/python -m bench.wake_bench                    # ~6 min
    .venv/bin/python -m bench.wake_bench --quick            # ~3 min: one round, the minute compressed

A fresh database (bench/run_standard.py's), scripts/run_production.sh with Celery ON (supervisord's
`celery worker`, the push worker `celery-push` on PUSH_QUEUE and `celery beat`, their concurrency as
deployed, on the Redis broker of REDIS_URL as production configures it: mediator_project/celery.py,
settings.CELERY_BROKER_URL), rate limits off,
metering on; the Spark engine is not started (SPARK_REMOTE points elsewhere: no report runs here).
PUSH_FCM_URL points at FCM's strict stand-in (tests/support/push_standins.py: the OAuth JWT checked
against the service account's key, the message against FCM's schema), run in this process and
stamping each accepted message's arrival; one tenant with an FCM provider. The stand-in runs on
this box, so its CPU is taken from the layout's in the ON runs (a real FCM's is not): the ratio is
if anything stricter than production's. Every wallet is granted
mediation over DIDComm v2 and registers its FCM token with `set-device-info` through the protocol.
Scenarios, in one run of the layout:

1. `rate` + `latency`: `--rounds` alternating runs (order flipping) of forwards at `--clients` to
   `--sleepers` wallets with a device (pushes ON) and as many without (pushes OFF: devices = 0, what a
   tenant without push has on every row). The bodies are ordered so that each sleeper's first
   forward of the run (its wake) comes at an even pace through the run, the rest coalesce
   (paced_forwards; the same order for OFF). Before
   each run the queues are emptied and the wake state cleared (no pickup otherwise: the phones
   sleep). Beside the load, one prober sends a forward every 1/`--probe-rate` s to a sleeper of its
   own pool (ON: with a device, never woken in that run; OFF: without), so both kinds carry the same
   extra load; latency = the probe's 202 → the stand-in's receipt of its token.
2. `grow`: one sleeping wallet with a device, 100 forwards spread over `--grow-seconds` (60; quick:
   10, the interval setting unchanged at 60 s); pushes counted at the stand-in once the broker is
   drained (target 1).
3. `down`: the stand-in answers every send 503 UNAVAILABLE with Retry-After, then (second case)
   hangs every send past the provider's read timeout; meanwhile forwards to `--down-sleepers`
   sleepers: every one must be answered 202 and stored (counted in PostgreSQL); then it comes back
   and every sleeper's wake must arrive (time from recovery to the last one).
4. `unacked`: one wallet with a device, in Pickup 4.0 live mode on /didcomm/ws (through nginx),
   never sending messages-received; MEDIATOR_DIDCOMM_LIVE_ACK_TIMEOUT_S=1 for this run. `--unacked`
   forwards: each pushed live, pushed again after the timeout (live.LIVE_RESENDS), still queued
   after the socket closes (never deleted early), a wake at the stand-in, and all of them
   delivered by a Pickup 4.0 delivery-request on the next socket; acknowledged, the queue is empty.

JSON + Markdown under bench/results/wake-<UTC time>.*
"""

from __future__ import annotations

import argparse
import asyncio
import http.client
import json
import os
import subprocess
import sys
import threading
import time
from concurrent.futures import ThreadPoolExecutor
from datetime import UTC, datetime
from types import SimpleNamespace

import httpx

from bench import loadgen, write_results
from bench.cpu import CpuSampler
from bench.didcomm_bench import Mediator, _pct, _row, forwards, forwards_summary, granted_wallets, inner_for
from bench.pg import db_url
from bench.run_standard import ROOT, Layout, machine, prepare_database, server_env
from tests.support.didcomm_agent import ENCRYPTED, Agent
from tests.support.push_standins import FcmStandin, _json

P4 = "https://didcomm.org/message-pickup/4.0/"
PUSH_FCM = "https://didcomm.org/push-notifications-fcm/1.0/"
LIVE_ACK_TIMEOUT_S = 1
LIMITS_OFF = ["MEDIATOR_DIDCOMM_RATE_LIMIT_PER_SENDER=0", "MEDIATOR_DIDCOMM_RATE_LIMIT_PER_IP=0"]


class TimedFcm(FcmStandin):
    """FCM's stand-in that stamps each accepted message (`arrivals`: (time.time(), token)) and can be
    down: `mode` "ok", "unavailable" (503 UNAVAILABLE with Retry-After) or "hang" (holds each send
    until released or `hang_s`)."""

    def __post_init__(self) -> None:
        super().__post_init__()
        self.arrivals: list[tuple[float, str]] = []
        self.mode = "ok"
        self.retry_after = "2"
        self.hang_s = 15.0
        self.released = threading.Event()
        self.refused = 0
        self.hung = 0

    def _send(self, project: str, headers: dict[str, str], body: bytes):
        if self.mode == "hang":
            with self._lock:
                self.hung += 1
            self.released.wait(self.hang_s)
        if self.mode == "unavailable":
            with self._lock:
                self.refused += 1
            error = {"code": 503, "message": "The service is currently unavailable.", "status": "UNAVAILABLE"}
            return _json(503, {"error": error}, {"retry-after": self.retry_after})
        answer = super()._send(project, headers, body)
        if answer[0] == 200:
            token = json.loads(body)["message"]["token"]
            with self._lock:
                self.arrivals.append((time.time(), token))
        return answer

    def count(self, tokens: set[str], since: float = 0.0) -> int:
        with self._lock:
            return sum(1 for t, tok in self.arrivals if tok in tokens and t >= since)

    def first(self, token: str, since: float) -> float | None:
        with self._lock:
            return next((t for t, tok in self.arrivals if tok == token and t >= since), None)


# --- the world ----------------------------------------------------------------------------------


class Sleeper(SimpleNamespace):
    """A granted wallet (`wallet`), its recipient DID (`rcpt`) and the forward's inner JWE (`inner`);
    `token` its FCM device token, or None (no device)."""


def sleepers(med: Mediator, n: int, prefix: str | None, threads: int = 4) -> list[Sleeper]:
    """`n` granted wallets, each registering FCM token `<prefix>-<i>` over DIDComm v2 (None: no device)."""
    pairs = granted_wallets(med, n, threads)

    def register(i: int) -> Sleeper:
        wallet, rcpt = pairs[i]
        token = None if prefix is None else f"{prefix}-{i}:APA91b" + "x" * 40
        if token is not None:
            msg = wallet.message(PUSH_FCM + "set-device-info", {"device_token": token, "device_platform": "android"})
            with httpx.Client(base_url=med.url, headers={"Host": med.host}, timeout=60) as c:
                resp = c.post("/didcomm", content=wallet.pack(msg, med.did), headers={"Content-Type": ENCRYPTED})
            if resp.status_code != 202:
                raise RuntimeError(f"set-device-info: {resp.status_code} {resp.text[:200]}")
        return Sleeper(wallet=wallet, rcpt=rcpt, inner=inner_for(rcpt), token=token)

    with ThreadPoolExecutor(threads) as pool:
        return list(pool.map(register, range(n)))


def configure_fcm(la, fcm: TimedFcm) -> None:
    """The tenant's FCM provider, its service account sealed (as the console saves it)."""
    code = (
        "import json, os\n"
        "from apps.push.models import PushProvider\n"
        "from apps.tenants.models import Tenant\n"
        "t = Tenant.objects.get(domain=os.environ['BENCH_HOST'])\n"
        "p = PushProvider(tenant=t, kind=PushProvider.Kind.FCM)\n"
        "p.seal(json.loads(os.environ['BENCH_FCM_ACCOUNT']))\n"
        "p.save()\n"
    )
    env = server_env(la) | {"BENCH_HOST": f"localhost:{la.port}", "BENCH_FCM_ACCOUNT": fcm.account().text}
    subprocess.run([sys.executable, "manage.py", "shell", "-c", code], cwd=ROOT, env=env, check=True)


def sql(database_url: str, statement: str, params: list | None = None):
    import psycopg

    with psycopg.connect(database_url, autocommit=True) as conn:
        cur = conn.execute(statement, params or [])
        return cur.fetchall() if cur.description else None


def reset(database_url: str) -> None:
    """Empty queues and clear every wake (as if every phone had picked up long ago): unmeasured."""
    sql(database_url, "DELETE FROM didcomm_queuedmessage")
    sql(database_url, "UPDATE messaging_pendingqueuedepth SET woken = false, woken_at = 0 WHERE woken OR woken_at > 0")


def stored(database_url: str, rcpts: list[Agent]) -> int:
    """Queued messages for these recipient DIDs."""
    rows = sql(
        database_url,
        "SELECT count(*) FROM didcomm_queuedmessage q JOIN didcomm_recipientkey r ON r.id = q.recipient_id"
        " WHERE r.recipient_did = ANY(%s)",
        [[r.did for r in rcpts]],
    )
    return rows[0][0]


# The wakes' queue (settings.PUSH_QUEUE, its own worker). The maintenance queue `celery` is not
# waited for: beat's tasks (a metering export, the outbound sweep) run there beside the bench and
# one may take minutes; it says nothing of the wakes.
PUSH_QUEUE = os.environ.get("PUSH_QUEUE", "push")


def _push_unacked(r) -> int:
    """Wake tasks reserved or running (acks are late): the broker's unacked entries routed to PUSH_QUEUE."""
    return sum(1 for raw in r.hvals("unacked") if json.loads(raw)[2] == PUSH_QUEUE)


def drain(redis_url: str, timeout: float = 600) -> float:
    """Wait until the broker holds no wake task (queued, reserved or running), twice in a row 0.2 s
    apart; the seconds waited."""
    import redis

    r = redis.Redis.from_url(redis_url)
    t0 = time.time()
    calm = 0
    while time.time() - t0 < timeout:
        idle = r.llen(PUSH_QUEUE) == 0 and _push_unacked(r) == 0
        calm = calm + 1 if idle else 0
        if calm >= 2:
            return round(time.time() - t0, 2)
        time.sleep(0.2)
    raise RuntimeError(f"the wakes did not drain in {timeout} s")


def wait_until(check, timeout: float, what: str) -> float:
    t0 = time.time()
    while not check():
        if time.time() - t0 > timeout:
            raise RuntimeError(f"{what}: not within {timeout} s")
        time.sleep(0.05)
    return time.time() - t0


# --- forward senders ------------------------------------------------------------------------------


def paced_forwards(med: Mediator, pop: list[Sleeper], n: int) -> list[bytes]:
    """n forwards over `pop`: sleeper i's first forward (its wake) at position i·n/len(pop), so the
    wakes come at an even pace through the run; every other forward to one of the sleepers met so
    far, in turn (concurrent clients hit different sleepers, as independent senders would)."""
    order, met = [], 0
    for k in range(n):
        now_met = min(len(pop), 1 + k * len(pop) // n)
        order.append(now_met - 1 if now_met > met else k % now_met)
        met = now_met
    targets = [(pop[i].rcpt, pop[i].inner) for i in order]
    out: list[bytes] = []
    for k in range(0, n, 500):
        out += forwards(med, targets[k : k + 500], len(targets[k : k + 500]))
    return out


class Poster:
    """POST /didcomm over one keep-alive connection to nginx; (status, 202-received time)."""

    def __init__(self, layout):
        self.port, self.host = int(layout.url.rsplit(":", 1)[1]), layout.host
        self.conn = http.client.HTTPConnection("127.0.0.1", self.port, timeout=60)

    def post(self, body: bytes) -> tuple[int, float, float]:
        t0 = time.time()
        self.conn.request("POST", "/didcomm", body=body, headers={"Content-Type": ENCRYPTED, "Host": self.host})
        resp = self.conn.getresponse()
        resp.read()
        return resp.status, t0, time.time()

    def close(self) -> None:
        self.conn.close()


class Prober(threading.Thread):
    """One forward every 1/rate s to the next sleeper of `pool` for `seconds`: (sleeper, status,
    request time, 202 time)."""

    def __init__(self, layout, med: Mediator, pool: list[Sleeper], rate: float, seconds: float, delay: float):
        super().__init__(daemon=True)
        self.layout, self.pool, self.rate, self.seconds, self.delay = layout, pool, rate, seconds, delay
        n = min(len(pool), int(rate * seconds) + 1)
        self.bodies = [forwards(med, [(s.rcpt, s.inner)], 1)[0] for s in pool[:n]]
        self.sent: list[tuple[Sleeper, int, float, float]] = []

    def run(self) -> None:
        time.sleep(self.delay)
        poster = Poster(self.layout)
        start = time.time()
        try:
            for i, body in enumerate(self.bodies):
                due = start + i / self.rate
                if due > start + self.seconds:
                    break
                time.sleep(max(0.0, due - time.time()))
                status, t_req, t_202 = poster.post(body)
                self.sent.append((self.pool[i], status, t_req, t_202))
        finally:
            poster.close()


# --- 1. rate and latency ----------------------------------------------------------------------------


def run_rate(layout, med, fcm, args, on_pop, off_pop, on_probes, off_probes) -> dict:
    dburl = db_url(args.db)
    kinds = {
        "pushes_on": lambda n: paced_forwards(med, on_pop, n),
        "pushes_off": lambda n: paced_forwards(med, off_pop, n),
    }
    probes = {"pushes_on": on_probes, "pushes_off": off_probes}
    target = {"path": "/didcomm", "content_type": ENCRYPTED, "ok_status": 202}
    for make in kinds.values():  # unmeasured warm-up
        reset(dburl)
        loadgen.drive(layout.url, layout.host, make(2000), args.clients, args.warmup, **target)
    drain(args.broker_url)
    runs: list[dict] = []
    latencies: list[float] = []
    req_latencies: list[float] = []
    missing = 0
    last: dict[str, float] = {}
    for rnd in range(1, args.rounds + 1):
        order = list(kinds) if rnd % 2 else list(reversed(kinds))
        for name in order:
            n = args.requests if name not in last else min(args.requests, int(last[name] * args.seconds * 1.5) + 500)
            bodies = kinds[name](n)
            reset(dburl)
            drain(args.broker_url)
            prober = Prober(layout, med, probes[name], args.probe_rate, args.seconds - 0.5, delay=2.25)
            prober.start()
            time.sleep(2.0)  # the metering flush of the previous run settles (the prober starts 0.25 s in)
            cpu = CpuSampler(server_pgid=layout.pgid, database=args.db)
            t0 = time.time()
            res = loadgen.drive(layout.url, layout.host, bodies, args.clients, args.seconds, cpu, **target)
            t1 = time.time()
            prober.join()
            drained = drain(args.broker_url)
            load_tokens = {s.token for s in on_pop if s.token}
            row = _row(rnd, name, res) | {
                "t0": round(t0, 1),
                "t1": round(t1, 1),
                "pushes_in_run": fcm.count(load_tokens, t0) - fcm.count(load_tokens, t1),
                "pushes_after_run": fcm.count(load_tokens, t1),
                "broker_drained_after_s": drained,
                "probe_statuses": {},
            }
            for s, status, t_req, t_202 in prober.sent:
                row["probe_statuses"][status] = row["probe_statuses"].get(status, 0) + 1
                if s.token is None:
                    continue
                at = fcm.first(s.token, t_req)
                if at is None:
                    missing += 1
                else:
                    latencies.append((at - t_202) * 1000)
                    req_latencies.append((at - t_req) * 1000)
            if name == "pushes_on":
                row["probes_woken"] = sum(1 for s, *_ in prober.sent if fcm.first(s.token, t0) is not None)
            row["probes"] = len(prober.sent)
            runs.append(row)
            last[name] = res["throughput_rps"]
            print(
                f"   round {rnd} {name:10s} {row['throughput_rps']:7.1f} fwd/s  p50 {row['p50_ms']}  p99 "
                f"{row['p99_ms']} ms  server {row['server_cpu_ms_per_req']} + PG {row['postgres_cpu_ms_per_req']}"
                f" CPU ms/req  pushes {row['pushes_in_run']} (+{row['pushes_after_run']} after)  {row['codes']}",
                file=sys.stderr,
            )
    summary = forwards_summary(runs, "pushes_on", base="pushes_off")
    # A wake the worker had not sent by the run's end is push work outside the measured window: the
    # ON rate is honest only while this stays near the wakes in flight (a few).
    summary["pushes_after_run_max"] = max((x["pushes_after_run"] for x in runs if x["kind"] == "pushes_on"), default=0)
    summary["wake_latency"] = {
        "probes": len(latencies),
        "missing": missing,
        "accepted_to_provider_p50_ms": round(_pct(latencies, 50), 1) if latencies else None,
        "accepted_to_provider_p99_ms": round(_pct(latencies, 99), 1) if latencies else None,
        "accepted_to_provider_max_ms": round(max(latencies), 1) if latencies else None,
        "request_to_provider_p50_ms": round(_pct(req_latencies, 50), 1) if req_latencies else None,
        "request_to_provider_p99_ms": round(_pct(req_latencies, 99), 1) if req_latencies else None,
    }
    return {"runs": runs, "summary": summary}


# --- 2. one queue grows by 100 ------------------------------------------------------------------------


def run_grow(layout, med, fcm, args, sleeper: Sleeper) -> dict:
    reset(db_url(args.db))
    drain(args.broker_url)
    bodies = forwards(med, [(sleeper.rcpt, sleeper.inner)], 100)
    poster = Poster(layout)
    statuses: dict[int, int] = {}
    t0 = time.time()
    try:
        for i, body in enumerate(bodies):
            time.sleep(max(0.0, t0 + i * args.grow_seconds / 100 - time.time()))
            status, *_ = poster.post(body)
            statuses[status] = statuses.get(status, 0) + 1
    finally:
        poster.close()
    elapsed = time.time() - t0
    drain(args.broker_url)
    return {
        "forwards": len(bodies),
        "over_s": round(elapsed, 1),
        "statuses": statuses,
        "stored": stored(db_url(args.db), [sleeper.rcpt]),
        "pushes": fcm.count({sleeper.token}, t0),
    }


# --- 3. provider down or slow -------------------------------------------------------------------------


def run_down(layout, med, fcm, args, pop: list[Sleeper], mode: str, outage_s: float) -> dict:
    """Forwards to `pop` for `outage_s` while the stand-in is `mode`; then it recovers."""
    dburl = db_url(args.db)
    reset(dburl)
    drain(args.broker_url)
    tokens = {s.token for s in pop}
    refused0, hung0 = fcm.refused, fcm.hung
    fcm.released.clear()
    fcm.mode = mode
    n = args.down_forwards
    bodies = forwards(med, [(s.rcpt, s.inner) for s in pop], n)
    poster = Poster(layout)
    statuses: dict[int, int] = {}
    lat: list[float] = []
    t0 = time.time()
    try:
        for i, body in enumerate(bodies):
            time.sleep(max(0.0, t0 + i * outage_s / n - time.time()))
            status, t_req, t_202 = poster.post(body)
            statuses[status] = statuses.get(status, 0) + 1
            lat.append((t_202 - t_req) * 1000)
    finally:
        poster.close()
    during = fcm.count(tokens, t0)
    kept = stored(dburl, [s.rcpt for s in pop])
    recovered = time.time()
    fcm.mode = "ok"
    fcm.released.set()
    took = wait_until(lambda: all(fcm.first(t, t0) for t in tokens), args.recovery_timeout, f"wakes after {mode}")
    drain(args.broker_url)
    return {
        "mode": mode,
        "outage_s": round(recovered - t0, 1),
        "sleepers": len(pop),
        "forwards": n,
        "statuses": statuses,
        "forward_p50_ms": round(_pct(lat, 50), 1),
        "forward_p99_ms": round(_pct(lat, 99), 1),
        "stored": kept,
        "lost": n - kept,
        "refused": n - statuses.get(202, 0),
        "provider_503_answers": fcm.refused - refused0,
        "provider_hung_requests": fcm.hung - hung0,
        "pushes_during_outage": during,
        "woken_after_recovery": sum(1 for t in tokens if fcm.first(t, recovered)),
        "last_wake_after_recovery_s": round(took, 1),
        "pushes_total": fcm.count(tokens, t0),
    }


# --- 4. Pickup 4.0 live delivery not acknowledged --------------------------------------------------


async def _unacked(layout, med: Mediator, fcm: TimedFcm, sleeper: Sleeper, n: int) -> dict:
    from websockets.asyncio.client import connect

    port = int(layout.url.rsplit(":", 1)[1])
    wallet = sleeper.wallet

    def frame(kind: str, body: dict) -> str:
        return wallet.pack(wallet.message(P4 + kind, body), med.did).decode()

    async def sock():
        return await connect(f"ws://{layout.host}/didcomm/ws", host="127.0.0.1", port=port, proxy=None,
                             compression=None, ping_interval=None, open_timeout=30, max_size=None)  # fmt: skip

    ws = await sock()
    await ws.send(frame("live-delivery-change", {"live_delivery": True}))
    status, _ = wallet.unpack(await asyncio.wait_for(ws.recv(), 30))
    assert status["type"] == P4 + "status" and status["body"]["live_delivery"] is True, status
    t0 = time.time()
    poster = Poster(layout)
    statuses: dict[int, int] = {}
    try:
        for body in forwards(med, [(sleeper.rcpt, sleeper.inner)], n):
            s, *_ = await asyncio.to_thread(poster.post, body)
            statuses[s] = statuses.get(s, 0) + 1
    finally:
        poster.close()
    pushes: dict[str, int] = {}
    # Each message is pushed once and again LIVE_RESENDS (2) times, a timeout apart: wait for all of them.
    deadline = time.time() + 10 * LIVE_ACK_TIMEOUT_S + 10
    while sum(pushes.values()) < 3 * n and time.time() < deadline:
        try:
            raw = await asyncio.wait_for(ws.recv(), max(0.1, deadline - time.time()))
        except TimeoutError:
            break
        msg, _ = wallet.unpack(raw)
        for att in msg.get("attachments", []):
            pushes[att["id"]] = pushes.get(att["id"], 0) + 1
    await ws.close()
    woken = await asyncio.to_thread(wait_until, lambda: fcm.first(sleeper.token, t0) is not None, 30, "the wake")
    ws = await sock()
    try:
        ask = wallet.message(P4 + "delivery-request", {"message_count_limit": 1000})
        await ws.send(wallet.pack(ask, med.did).decode())
        delivery, _ = wallet.unpack(await asyncio.wait_for(ws.recv(), 30))
        again = [att["id"] for att in delivery.get("attachments", [])]
        return {
            "forwards": n,
            "statuses": statuses,
            "pushed_live": len(pushes),
            "pushes_per_message": sorted(set(pushes.values())),
            "wake_after_s": round(woken, 1),
            "pushes_at_fcm": fcm.count({sleeper.token}, t0),
            "redelivered_on_next_socket": len(set(again)),
            "redelivered_are_the_pushed": set(again) == set(pushes),
            "_ack": (ws, again),
        }
    except BaseException:
        await ws.close()
        raise


def run_unacked(layout, med, fcm, args, sleeper: Sleeper) -> dict:
    dburl = db_url(args.db)
    reset(dburl)
    drain(args.broker_url)

    async def go() -> dict:
        res = await _unacked(layout, med, fcm, sleeper, args.unacked)
        ws, ids = res.pop("_ack")
        res["stored_before_ack"] = await asyncio.to_thread(stored, dburl, [sleeper.rcpt])
        try:
            ack = sleeper.wallet.message(P4 + "messages-received", {"message_id_list": ids})
            await ws.send(sleeper.wallet.pack(ack, med.did).decode())
            left = lambda: stored(dburl, [sleeper.rcpt])  # noqa: E731
            await asyncio.to_thread(wait_until, lambda: left() == 0, 15, "the acknowledgement")
            res["stored_after_ack"] = left()
        finally:
            await ws.close()
        return res

    res = asyncio.run(go())
    res["lost"] = res["forwards"] - res["redelivered_on_next_socket"]
    res["deleted_early"] = res["forwards"] - res["stored_before_ack"]
    return res


# --- the run ------------------------------------------------------------------------------------------


def main(argv: list[str] | None = None) -> dict:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--quick", action="store_true", help="one round of 5 s, the minute compressed to 10 s")
    ap.add_argument("--db", default=os.environ.get("BENCH_DB", "mediator_bench_wake"))
    ap.add_argument("--redis-url", default=os.environ.get("BENCH_REDIS_URL", "redis://127.0.0.1:6379/10"))
    ap.add_argument("--port", type=int, default=int(os.environ.get("BENCH_PORT", "8360")))
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--seconds", type=float, default=10)
    ap.add_argument("--warmup", type=float, default=3)
    ap.add_argument("--clients", type=int, default=16)
    ap.add_argument("--requests", type=int, default=15_000, help="bodies built for a kind's first run")
    ap.add_argument("--sleepers", type=int, default=300, help="wallets with a device (and as many without)")
    ap.add_argument("--probe-rate", type=float, default=10, help="latency probes per second")
    ap.add_argument("--grow-seconds", type=float, default=60)
    ap.add_argument("--down-sleepers", type=int, default=4)
    ap.add_argument("--down-forwards", type=int, default=200)
    ap.add_argument("--outage-s", type=float, default=8)
    ap.add_argument("--recovery-timeout", type=float, default=90)
    ap.add_argument("--unacked", type=int, default=20)
    ap.add_argument("--env", nargs="*", action="extend", default=[], help="extra KEY=VALUE for the layout")
    args = ap.parse_args(argv)
    if args.quick:
        args.rounds, args.seconds, args.warmup, args.requests = 1, 5, 1, 5000
        args.sleepers, args.grow_seconds, args.outage_s = 150, 10, 6
    args.broker_url = args.redis_url  # settings.CELERY_BROKER_URL: REDIS_URL as it is (a TCP URL)
    started = datetime.now(UTC).strftime("%Y%m%dT%H%M%SZ")
    report: dict = {"started": started, "command": "python -m bench.wake_bench " + " ".join(sys.argv[1:] if argv is None else argv),
                    "machine": machine()}  # fmt: skip
    fcm = TimedFcm()
    env = [
        *LIMITS_OFF,
        f"PUSH_FCM_URL={fcm.url}",
        f"MEDIATOR_DIDCOMM_LIVE_ACK_TIMEOUT_S={LIVE_ACK_TIMEOUT_S}",
        "SPARK_REMOTE=sc://127.0.0.1:9",  # no Spark engine: no usage report runs in this bench
        *args.env,
    ]
    la = SimpleNamespace(db=args.db, redis_url=args.redis_url, port=args.port, env=env, no_celery=False,
                         layout="production")  # fmt: skip
    print(f"== fresh database {args.db}", file=sys.stderr)
    prepare_database(la)
    configure_fcm(la, fcm)
    import redis

    redis.Redis.from_url(args.redis_url).flushdb()  # no task of an earlier run
    layout = Layout(la)
    try:
        med = Mediator(layout.url, layout.host)
        t0 = time.time()
        n_probe = int(args.probe_rate * args.seconds) + 2
        on_pop = sleepers(med, args.sleepers, "load")
        off_pop = sleepers(med, args.sleepers, None)
        on_probes = sleepers(med, n_probe, "probe")
        off_probes = sleepers(med, n_probe, None)
        extra = sleepers(med, 2 + args.down_sleepers * 2, "solo")
        report["setup_s"] = round(time.time() - t0, 1)
        print(f"== {2 * args.sleepers + 2 * n_probe + len(extra)} wallets in {report['setup_s']} s", file=sys.stderr)
        print("== rate and latency", file=sys.stderr)
        report["rate"] = run_rate(layout, med, fcm, args, on_pop, off_pop, on_probes, off_probes)
        print("== grow", file=sys.stderr)
        report["grow"] = run_grow(layout, med, fcm, args, extra[0])
        print(json.dumps(report["grow"]), file=sys.stderr)
        down = extra[2:]
        report["down"] = []
        for i, mode in enumerate(("unavailable", "hang")):
            print(f"== provider {mode}", file=sys.stderr)
            pop = down[i * args.down_sleepers : (i + 1) * args.down_sleepers]
            report["down"].append(run_down(layout, med, fcm, args, pop, mode, args.outage_s))
            print(json.dumps(report["down"][-1]), file=sys.stderr)
        print("== Pickup 4.0 live, unacknowledged", file=sys.stderr)
        report["unacked"] = run_unacked(layout, med, fcm, args, extra[1])
        print(json.dumps(report["unacked"]), file=sys.stderr)
    finally:
        layout.stop()
        fcm.close()
    report["loadavg_at_end"] = os.getloadavg()
    write_results("wake", report, markdown(report))
    return report


def markdown(r: dict) -> list[str]:
    m = r["machine"]
    s = r["rate"]["summary"]
    w = s["wake_latency"]
    g = r["grow"]
    u = r["unacked"]
    out = [
        f"# push wake-ups — {r['started']}",
        "",
        "Command: `" + r["command"] + "`",
        "",
        f"machine: {m['nproc']} cores, {m['cpu']}; load {m['loadavg_at_start']} at start, {r['loadavg_at_end']} at end",
        "",
        "## Forwards/s, pushes on / off, and wake latency",
        "",
        "| round | kind | fwd/s | p50 ms | p99 ms | server CPU ms/req (by process) | PG CPU ms/req | pushes in run "
        "(+ after) | probes | codes |",
        "|---|---|---|---|---|---|---|---|---|---|",
    ]
    for x in r["rate"]["runs"]:
        by = ", ".join(f"{k} {v}" for k, v in x["by_process"].items() if v)
        out.append(
            f"| {x['round']} | {x['kind']} | {x['throughput_rps']} | {x['p50_ms']} | {x['p99_ms']} "
            f"| {x['server_cpu_ms_per_req']} ({by}) | {x['postgres_cpu_ms_per_req']} "
            f"| {x['pushes_in_run']} (+{x['pushes_after_run']}) | {x['probes']} | {x['codes']} |"
        )
    out += [
        "",
        f"ON / OFF fwd/s per round {s['rate_ratio_per_round']}, median **{s['rate_ratio_median']}** (target ≥ 0.95); "
        f"CPU per forward OFF / ON median {s['cpu_ratio_median']}",
        "",
        f"Forward accepted (202) → FCM stand-in received, recipient asleep, under that load: "
        f"p50 **{w['accepted_to_provider_p50_ms']} ms**, p99 **{w['accepted_to_provider_p99_ms']} ms**, "
        f"max {w['accepted_to_provider_max_ms']} ms over {w['probes']} probes, {w['missing']} missing "
        f"(target p99 ≤ 1000 ms); from the request's start p50 {w['request_to_provider_p50_ms']}, "
        f"p99 {w['request_to_provider_p99_ms']} ms",
        "",
        "## One sleeping queue grows by 100",
        "",
        f"{g['forwards']} forwards over {g['over_s']} s, {g['statuses']}, {g['stored']} stored: "
        f"**{g['pushes']} push(es)** at the stand-in (target 1)",
        "",
        "## Provider down or slow",
        "",
        "| provider | outage s | sleepers | forwards | answers | forward p50 / p99 ms | stored | lost | refused "
        "| provider answers during outage | woken after recovery | last wake after recovery s | pushes |",
        "|---|---|---|---|---|---|---|---|---|---|---|---|---|",
    ]
    for d in r["down"]:
        during = (
            f"{d['provider_503_answers']}× 503 Retry-After"
            if d["mode"] == "unavailable"
            else f"{d['provider_hung_requests']} hung"
        )
        out.append(
            f"| {d['mode']} | {d['outage_s']} | {d['sleepers']} | {d['forwards']} | {d['statuses']} "
            f"| {d['forward_p50_ms']} / {d['forward_p99_ms']} | {d['stored']} | **{d['lost']}** | **{d['refused']}** "
            f"| {during} | {d['woken_after_recovery']}/{d['sleepers']} | {d['last_wake_after_recovery_s']} "
            f"| {d['pushes_total']} |"
        )
    out += [
        "",
        "## Pickup 4.0 live delivery not acknowledged",
        "",
        f"{u['forwards']} forwards {u['statuses']}, pushed live {u['pushed_live']} (pushes per message "
        f"{u['pushes_per_message']}, ack timeout {LIVE_ACK_TIMEOUT_S} s), still queued after the socket closed "
        f"**{u['stored_before_ack']}** (deleted early **{u['deleted_early']}**), wake at FCM after "
        f"{u['wake_after_s']} s ({u['pushes_at_fcm']} push), redelivered on the next socket "
        f"**{u['redelivered_on_next_socket']}** (the same ids: {u['redelivered_are_the_pushed']}; lost "
        f"**{u['lost']}**), acknowledged: {u['stored_after_ack']} left",
    ]
    return out


if __name__ == "__main__":
    main()
