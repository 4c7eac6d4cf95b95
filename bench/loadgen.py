"""Protocol load generator: pre-generates signed commands with our client library, then drives a
running deployment from separate processes over keep-alive HTTP and reports throughput and
latency percentiles (JSON + a Markdown row).

    python -m bench.loadgen --url http://127.0.0.1:8000 --scenario two_way_private --clients 16 --seconds 20

Scenarios: two_way_private, query_pending_ack, save_events, query_events_by_tag.
Setup (registration, contracts, seeding) goes through the protocol too.
"""

from __future__ import annotations

import argparse
import json
import multiprocessing as mp
import os
import socket
import statistics
import sys
import time
import uuid
from dataclasses import dataclass
from urllib.parse import urlparse

from apps.wire.canonical import canonical_bytes
from apps.wire.client import Identity, MediatorClient, agree_contract
from bench.cpu import CpuSampler
from bench.pg import indexes_dropped

DAY_S = 86_400


@dataclass
class World:
    client: MediatorClient
    senders: list[Identity]
    recipients: list[Identity]


def build_world(url: str, host: str | None, pairs: int) -> World:
    """Register `pairs` senders and recipients; each recipient saves a contract with its sender."""
    client = MediatorClient(url, host=host, timeout=30)
    senders = [Identity.create(f"s{i}", client.did) for i in range(pairs)]
    recipients = [Identity.create(f"r{i}", client.did) for i in range(pairs)]
    for who in senders + recipients:
        client.register(who, lifetime_s=DAY_S)
    for s, r in zip(senders, recipients, strict=True):
        save_contract(client, s, r)
    return World(client, senders, recipients)


def save_contract(client: MediatorClient, sender: Identity, recipient: Identity) -> None:
    """`recipient` saves a day-long contract with `sender` (both remember it), so that `sender`
    may send it TWO_WAY_PRIVATE."""
    signed, _, _ = agree_contract(sender, recipient, lifetime_s=DAY_S)
    client.command(recipient, {"type": "SAVE_COMMUNICATION_CONTRACT", "signed_communication_contract": signed})


def gen_two_way(world: World, n: int, payload_bytes: int = 256) -> list[bytes]:
    """n signed TWO_WAY_PRIVATE commands, round-robin over the pairs."""
    blob = "A" * payload_bytes
    out = []
    for i in range(n):
        s = world.senders[i % len(world.senders)]
        r = world.recipients[i % len(world.recipients)]
        out.append(canonical_bytes(s.sign_command(recipient_did=r.did, payload=blob, channel="TWO_WAY_PRIVATE")))
    return out


def gen_direct(world: World, who_list: list[Identity], n: int, make_payload) -> list[bytes]:
    out = []
    for i in range(n):
        who = who_list[i % len(who_list)]
        out.append(canonical_bytes(who.sign_command(recipient_did=world.client.did, payload=make_payload(i, who))))
    return out


class RawHTTP:
    """A minimal keep-alive HTTP/1.1 client for the load: request bytes built once per body, one
    `sendall`, and a response parser that reads the status line, Content-Length (or chunks) and the
    body: `http.client` costs several times its client CPU per request, CPU the server under test
    would then lack on a shared box."""

    def __init__(
        self,
        hostname: str,
        port: int,
        host_header: str,
        timeout: float = 30.0,
        *,
        path: str = "/",
        content_type: str = "application/json",
    ):
        self.addr = (hostname, port)
        self.head = f"POST {path} HTTP/1.1\r\nHost: {host_header}\r\nContent-Type: {content_type}\r\n".encode()
        self.timeout = timeout
        self.sock: socket.socket | None = None
        self.buf = b""

    def request_bytes(self, body: bytes) -> bytes:
        return self.head + b"Content-Length: " + str(len(body)).encode() + b"\r\n\r\n" + body

    def _connect(self) -> socket.socket:
        sock = socket.create_connection(self.addr, timeout=self.timeout)
        sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        self.sock, self.buf = sock, b""
        return sock

    def close(self) -> None:
        if self.sock is not None:
            self.sock.close()
        self.sock, self.buf = None, b""

    def _fill(self) -> None:
        chunk = self.sock.recv(65536)
        if not chunk:
            raise ConnectionError("server closed the connection")
        self.buf += chunk

    def _read_line(self) -> bytes:
        while b"\r\n" not in self.buf:
            self._fill()
        line, self.buf = self.buf.split(b"\r\n", 1)
        return line

    def _read_exact(self, n: int) -> bytes:
        while len(self.buf) < n:
            self._fill()
        data, self.buf = self.buf[:n], self.buf[n:]
        return data

    def send(self, request: bytes) -> tuple[int, bytes]:
        """One request on the kept-alive connection: (status, body)."""
        sock = self.sock or self._connect()
        sock.sendall(request)
        while b"\r\n\r\n" not in self.buf:
            self._fill()
        head, self.buf = self.buf.split(b"\r\n\r\n", 1)
        lines = head.split(b"\r\n")
        status = int(lines[0].split(b" ", 2)[1])
        headers = {}
        for line in lines[1:]:
            name, _, value = line.partition(b":")
            headers[name.strip().lower()] = value.strip().lower()
        if b"content-length" in headers:
            body = self._read_exact(int(headers[b"content-length"]))
        elif headers.get(b"transfer-encoding") == b"chunked":
            parts = []
            while size := int(self._read_line().split(b";")[0], 16):
                parts.append(self._read_exact(size))
                self._read_exact(2)
            self._read_line()  # (no trailers)
            body = b"".join(parts)
        else:
            raise ConnectionError("response without a length")
        if headers.get(b"connection") == b"close":
            self.close()
        return status, body


def _code(status: int, data: bytes, ok: int) -> str:
    """SUCCESS, or the error's code: Decentrl's `code`, a DIDComm problem report's `body.code`."""
    if status == ok:
        return "SUCCESS"
    try:
        answer = json.loads(data)
    except ValueError:
        return str(status)
    return answer.get("code") or (answer.get("body") or {}).get("code") or str(status)


def _worker(url: str, host: str | None, bodies: list[bytes], deadline: float, q, target: dict) -> None:
    """One client: sends its bodies in order over one keep-alive connection until done or deadline."""
    u = urlparse(url)
    conn = RawHTTP(
        u.hostname, u.port or 80, host or f"{u.hostname}:{u.port}", path=target["path"], content_type=target["type"]
    )
    requests = [conn.request_bytes(b) for b in bodies]
    lat: list[float] = []
    codes: dict[str, int] = {}
    for request in requests:
        if time.perf_counter() > deadline:
            break
        t0 = time.perf_counter()
        try:
            status, data = conn.send(request)
        except (OSError, ValueError, IndexError):
            conn.close()
            codes["CONNECTION_ERROR"] = codes.get("CONNECTION_ERROR", 0) + 1
            continue
        lat.append(time.perf_counter() - t0)
        code = _code(status, data, target["ok"])
        codes[code] = codes.get(code, 0) + 1
    conn.close()
    t = os.times()
    q.put((lat, codes, t.user + t.system))


def drive(
    url: str,
    host: str | None,
    bodies: list[bytes],
    clients: int,
    seconds: float,
    cpu: CpuSampler | None = None,
    *,
    path: str = "/",
    content_type: str = "application/json",
    ok_status: int = 200,
) -> dict:
    """Split `bodies` over `clients` processes and run them at once (POST `path`; a response with
    `ok_status` counts as SUCCESS, e.g. 202 for DIDComm forwards to /didcomm).

    With a CpuSampler the result also says where the CPU went during the run: server processes,
    PostgreSQL backends of the bench database, the load generator's own clients, and the rest of
    the machine (other work sharing the cores).
    """
    chunks = [bodies[i::clients] for i in range(clients)]
    q: mp.Queue = mp.Queue()
    before = cpu.sample() if cpu else None
    ctx_start = time.perf_counter()
    deadline = ctx_start + seconds
    target = {"path": path, "type": content_type, "ok": ok_status}
    procs = [mp.Process(target=_worker, args=(url, host, c, deadline, q, target)) for c in chunks]
    for p in procs:
        p.start()
    results = [q.get() for _ in procs]
    elapsed = time.perf_counter() - ctx_start
    after = cpu.sample() if cpu else None
    for p in procs:
        p.join()
    lat = sorted(x for r in results for x in r[0])
    codes: dict[str, int] = {}
    for _, c, _cpu in results:
        for k, v in c.items():
            codes[k] = codes.get(k, 0) + v
    out = summarize(lat, codes, elapsed, clients)
    if cpu and before and after:
        out["cpu"] = cpu.report(before, after, elapsed, len(lat), client_cpu_s=sum(r[2] for r in results))
    return out


def pct(sorted_vals: list[float], p: float) -> float:
    if not sorted_vals:
        return float("nan")
    k = min(len(sorted_vals) - 1, max(0, int(round(p / 100 * len(sorted_vals) + 0.5)) - 1))
    return sorted_vals[k]


def summarize(lat: list[float], codes: dict, elapsed: float, clients: int) -> dict:
    return {
        "requests": len(lat),
        "clients": clients,
        "elapsed_s": round(elapsed, 3),
        "throughput_rps": round(len(lat) / elapsed, 1) if elapsed else 0,
        "p50_ms": round(pct(lat, 50) * 1000, 2),
        "p95_ms": round(pct(lat, 95) * 1000, 2),
        "p99_ms": round(pct(lat, 99) * 1000, 2),
        "mean_ms": round(statistics.fmean(lat) * 1000, 2) if lat else None,
        "codes": codes,
    }


# --- scenarios: setup once per world, then fresh signed bodies for every run --------------------


def setup_none(world: World, args) -> dict:
    return {}


def bodies_two_way_private(world: World, args, state: dict) -> tuple[list[bytes], dict]:
    return gen_two_way(world, args.requests), {"payload_bytes": 256}


def bodies_query_pending_ack(world: World, args, state: dict) -> tuple[list[bytes], dict]:
    """Fill queues (not timed), then alternate QUERY_PENDING_EVENTS (page of 10) and an ACK of 10
    ids that are really pending: every ACK removes what the next QUERY would have returned."""
    seed = gen_two_way(world, min(args.requests, 100 * len(world.recipients)))
    drive(args.url, args.host, seed, min(args.clients, 8), 600)
    bodies = []
    # ACK ids are those currently pending: fetch them through the protocol, then pre-sign.
    for r in world.recipients:
        page = world.client.pending_events(r, page_size=100)
        ids = [e["id"] for e in page["pending_events"]]
        for i in range(0, len(ids), 10):
            query = {"type": "QUERY_PENDING_EVENTS", "pagination": {"page": 0, "page_size": 10}}
            bodies.append(canonical_bytes(r.sign_command(recipient_did=world.client.did, payload=query)))
            ack = {"type": "ACKNOWLEDGE_PENDING_EVENTS", "event_ids": ids[i : i + 10]}
            bodies.append(canonical_bytes(r.sign_command(recipient_did=world.client.did, payload=ack)))
    return bodies, {}


def _event(who: Identity, other: Identity, i: int, tags: list[str]) -> dict:
    return {
        "sender_did": other.did,
        "recipient_did": who.did,
        "timestamp": 1_700_000_000 + i,
        "payload": "B" * 200,
        "encrypted_tags": tags,
    }


def setup_save_events(world: World, args) -> dict:
    return {"tags": {r.did: [r.tag(f"chat.{k}") for k in range(10)] for r in world.recipients}}


def bodies_save_events(world: World, args, state: dict) -> tuple[list[bytes], dict]:
    rec = world.recipients
    tags = state["tags"]

    def payload(i, who):
        other = world.senders[rec.index(who)]
        return {
            "type": "SAVE_EVENTS",
            "events": [_event(who, other, i * 10 + j, [tags[who.did][(i + j) % 10]]) for j in range(10)],
        }

    return gen_direct(world, rec, args.requests, payload), {"events_per_command": 10}


TAGS_PER_OWNER = 1000


def _bulk_seed_sql(
    database_url: str, tenant_did: str, owners: list[Identity], others: list[Identity], tags: dict, total: int
) -> None:
    """Store `total` events spread over `owners` straight into PostgreSQL, with the rows exactly as
    SAVE_EVENTS stores them (one StoredEvent + one EventTag per event, the tag carrying the event's
    timestamp, real encrypted tags), with their indexes dropped and re-created (bench.pg.indexes_dropped),
    then VACUUM ANALYZE: much faster than seeding through the
    protocol (`--seed protocol` does that instead)."""
    import psycopg

    per_owner = total // len(owners)
    tables = ("messaging_storedevent", "messaging_eventtag")
    with psycopg.connect(database_url, autocommit=True) as conn:
        tenant_id = conn.execute("SELECT id FROM tenants_tenant WHERE did = %s", [tenant_did]).fetchone()[0]
        with indexes_dropped(conn, list(tables)):
            for who, other in zip(owners, others, strict=True):
                conn.execute(
                    """
                    WITH ev AS (
                        INSERT INTO messaging_storedevent (public_id, tenant_id, owner_did, sender_did, recipient_did,
                            contract_id, timestamp, payload, payload_bytes, encrypted_tags, processed, created_at)
                        SELECT gen_random_uuid(), %(t)s, %(owner)s, %(other)s, %(owner)s, NULL, 1700000000 + g,
                            %(payload)s, 200, jsonb_build_array((%(tags)s::text[])[1 + g %% %(ntags)s]), false, now()
                        FROM generate_series(0, %(n)s - 1) g
                        RETURNING id, timestamp, encrypted_tags->>0 AS tag
                    )
                    INSERT INTO messaging_eventtag (tenant_id, owner_did, event_id, tag, timestamp)
                    SELECT %(t)s, %(owner)s, id, tag, timestamp FROM ev
                    """,
                    {"t": tenant_id, "owner": who.did, "other": other.did, "payload": "B" * 200, "tags": tags[who.did],
                     "ntags": TAGS_PER_OWNER, "n": per_owner},
                )  # fmt: skip
                print(f"seeded {per_owner} events for one owner", file=sys.stderr)
        conn.execute("VACUUM ANALYZE messaging_storedevent")
        conn.execute("VACUUM ANALYZE messaging_eventtag")


def setup_query_events_by_tag(world: World, args) -> dict:
    """Seed `--stored` events over `--tag-owners` owners, `TAGS_PER_OWNER` tags each, so that a
    tag matches stored/(owners*1000) events (1M, 10 owners: 100 events per tag, a full page)."""
    owners = world.recipients[: args.tag_owners]
    others = world.senders[: args.tag_owners]
    tags = {r.did: [r.tag(f"t{k}") for k in range(TAGS_PER_OWNER)] for r in owners}
    started = time.perf_counter()
    if args.stored and args.seed == "sql":
        _bulk_seed_sql(args.database_url, world.client.did, owners, others, tags, args.stored)
    elif args.stored:
        per_cmd = 100
        total_cmds = args.stored // per_cmd
        done = 0
        while done < total_cmds:
            n = min(2000, total_cmds - done)

            def seed_payload(i, who, base=done):
                other = others[owners.index(who)]
                k = (base + i) * per_cmd
                events = [_event(who, other, k + j, [tags[who.did][(k + j) % TAGS_PER_OWNER]]) for j in range(per_cmd)]
                return {"type": "SAVE_EVENTS", "events": events}

            bodies = gen_direct(world, owners, n, seed_payload)
            res = drive(args.url, args.host, bodies, min(args.clients, 8), 600)
            done += n
            print(f"seeded {done * per_cmd} events ({res['throughput_rps']} cmd/s)", file=sys.stderr)
    return {"owners": owners, "tags": tags, "seed_s": round(time.perf_counter() - started, 1)}


def bodies_query_events_by_tag(world: World, args, state: dict) -> tuple[list[bytes], dict]:
    owners, tags = state["owners"], state["tags"]

    def q(i, who):
        return {
            "type": "QUERY_EVENTS",
            "filter": {"encrypted_tags": [tags[who.did][(i * 7919) % TAGS_PER_OWNER]]},
            "pagination": {"page": 0, "page_size": 10},
        }

    bodies = gen_direct(world, owners, args.requests, q)
    return bodies, {"stored_events": args.stored, "seed": args.seed, "seed_s": state["seed_s"]}


SCENARIOS = {
    "two_way_private": (setup_none, bodies_two_way_private),
    "query_pending_ack": (setup_none, bodies_query_pending_ack),
    "save_events": (setup_save_events, bodies_save_events),
    "query_events_by_tag": (setup_query_events_by_tag, bodies_query_events_by_tag),
}

MD_HEADER = (
    "| scenario | clients | requests | req/s | p50 ms | p95 ms | p99 ms | server CPU ms/req | PG CPU ms/req "
    "| client CPU share | other CPU share | nginx µs/req | codes |\n|---|---|---|---|---|---|---|---|---|---|---|---|---|"
)


def nginx_us(cpu: dict | None):
    """nginx's CPU per request in µs: the same work for every request of every run, so it reads how
    fast the VM ran during the run (throughput × this stays roughly constant across runs whose
    throughput moves with the box's other load)."""
    ms = ((cpu or {}).get("server_cpu_ms_per_req_by_process") or {}).get("nginx")
    return round(ms * 1000) if ms else "-"


def markdown_row(name: str, r: dict) -> str:
    c = r.get("cpu") or {}
    return (
        f"| {name} | {r['clients']} | {r['requests']} | {r['throughput_rps']} | {r['p50_ms']} | {r['p95_ms']} "
        f"| {r['p99_ms']} | {c.get('server_cpu_ms_per_req', '-')} | {c.get('postgres_cpu_ms_per_req', '-')} "
        f"| {c.get('client_cpu_share', '-')} | {c.get('other_cpu_share', '-')} | {nginx_us(c)} | {r['codes']} |"
    )


def _median(runs: list[dict], key: str, sub: str | None = None):
    vals = [(r.get(sub) or {}).get(key) if sub else r.get(key) for r in runs]
    vals = [v for v in vals if v is not None]
    return statistics.median(vals) if vals else None


def run_scenario(args, world: World | None = None, cpu: CpuSampler | None = None, state: dict | None = None) -> dict:
    """Setup once (unless `state` is given), then `args.runs` timed runs with fresh bodies;
    returns the report with medians (and the world and state, for another sweep over the same data)."""
    world = world or build_world(args.url, args.host, args.pairs)
    setup, make_bodies = SCENARIOS[args.scenario]
    state = state if state is not None else setup(world, args)
    runs = []
    budget = args.requests
    for _ in range(args.runs):
        # Pre-signing is not free (SAVE_EVENTS bodies especially): after the first run, sign what
        # the deadline can use (1.5x the last throughput) instead of the whole --requests budget.
        args.requests = budget if not runs else min(budget, int(runs[-1]["throughput_rps"] * args.seconds * 1.5) + 500)
        bodies, extra = make_bodies(world, args, state)
        res = drive(args.url, args.host, bodies, args.clients, args.seconds, cpu)
        res.update(extra)
        runs.append(res)
        print(json.dumps(res), file=sys.stderr)
    args.requests = budget
    med = {k: _median(runs, k) for k in ("throughput_rps", "p50_ms", "p95_ms", "p99_ms")}
    nginx = [v for v in (nginx_us(r.get("cpu")) for r in runs) if v != "-"]
    med["nginx_us_per_req"] = statistics.median(nginx) if nginx else None
    for k in ("server_cpu_ms_per_req", "postgres_cpu_ms_per_req", "client_cpu_ms_per_req", "client_cpu_share",
              "other_cpu_share", "capacity_rps_all_cores"):  # fmt: skip
        med[k] = _median(runs, k, "cpu")
    return {
        "scenario": args.scenario,
        "clients": args.clients,
        "runs": runs,
        "median": med,
        "id": str(uuid.uuid4()),
        "_state": state,
        "_world": world,
    }


def parser() -> argparse.ArgumentParser:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--url", default="http://127.0.0.1:8000")
    ap.add_argument("--host", default=None, help="Host header (tenant) if it differs from the URL")
    ap.add_argument("--scenario", choices=sorted(SCENARIOS), default="two_way_private")
    ap.add_argument("--clients", type=int, default=16)
    ap.add_argument("--pairs", type=int, default=64)
    ap.add_argument("--requests", type=int, default=20_000, help="bodies pre-signed per run (upper bound)")
    ap.add_argument("--seconds", type=float, default=20, help="a run stops at this deadline")
    ap.add_argument("--stored", type=int, default=0, help="events to seed for query_events_by_tag")
    ap.add_argument("--seed", choices=("protocol", "sql"), default="protocol", help="how to seed --stored events")
    ap.add_argument("--tag-owners", type=int, default=10, help="owners the stored events are spread over")
    ap.add_argument("--database-url", default=os.environ.get("DATABASE_URL"), help="for --seed sql")
    ap.add_argument("--server-pgid", type=int, default=None, help="process group of the server (CPU accounting)")
    ap.add_argument("--database", default=None, help="database name of the server (PostgreSQL CPU accounting)")
    ap.add_argument("--runs", type=int, default=1)
    ap.add_argument("--sweep", type=int, nargs="+", default=None, help="client counts to run in turn (same data)")
    ap.add_argument("--json", dest="json_out", default=None)
    return ap


def main(argv: list[str] | None = None) -> dict:
    args = parser().parse_args(argv)
    cpu = None
    if args.server_pgid or args.database:
        cpu = CpuSampler(server_pgid=args.server_pgid, database=args.database)
    reports, world, state = [], None, None
    for clients in args.sweep or [args.clients]:
        # --sweep: the same world and seeded data, measured at each concurrency in turn.
        args.clients = clients
        rep = run_scenario(args, world=world, cpu=cpu, state=state)
        world, state = rep.pop("_world"), rep.pop("_state")
        reports.append(rep)
    report = reports[0] if len(reports) == 1 else {"scenario": args.scenario, "sweep": reports}
    print(json.dumps(report, indent=2, default=str))
    print("\n" + MD_HEADER)
    for rep in reports:
        for r in rep["runs"]:
            print(markdown_row(args.scenario, r))
    if args.json_out:
        with open(args.json_out, "w") as fh:
            json.dump(report, fh, indent=2, default=str)
    return report


if __name__ == "__main__":
    main()
