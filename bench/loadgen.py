"""Protocol load generator: pre-generates signed commands with our client library, then drives a
running deployment from separate processes over keep-alive HTTP and reports throughput and
latency percentiles (JSON + a Markdown row).

    python -m bench.loadgen --url http://127.0.0.1:8000 --scenario two_way_private --clients 16 --seconds 20

Scenarios: two_way_private, query_pending_ack, save_events, query_events_by_tag.
Setup (registration, contracts, seeding) goes through the protocol too.
"""

from __future__ import annotations

import argparse
import http.client
import json
import multiprocessing as mp
import os
import statistics
import sys
import time
import uuid
from dataclasses import dataclass
from urllib.parse import urlparse

from apps.protocol.wire import contract as wc
from apps.protocol.wire.canonical import canonical_bytes
from apps.protocol.wire.client import Identity, MediatorClient
from apps.protocol.wire.did import parse_decentrl

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
        req = wc.build_request(
            requestor_did=s.did, recipient_did=r.did, recipient_prekey=parse_decentrl(r.did).pre_key,
            signing=s.signing, expires_at=int(time.time()) + DAY_S,
        )
        signed, eph = wc.accept_request(req.request, r.signing)
        s.remember_contract(signed, req.ephemeral.private)
        r.remember_contract(signed, eph.private)
        client.command(r, {"type": "SAVE_COMMUNICATION_CONTRACT", "signed_communication_contract": signed})
    return World(client, senders, recipients)


def gen_two_way(world: World, n: int, payload_bytes: int = 256) -> list[bytes]:
    """n signed TWO_WAY_PRIVATE commands, round-robin over the pairs."""
    blob = ("A" * payload_bytes)
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


def _worker(url: str, host: str | None, bodies: list[bytes], deadline: float, q) -> None:
    """One client: sends its bodies in order over one keep-alive connection until done or deadline."""
    u = urlparse(url)
    conn = http.client.HTTPConnection(u.hostname, u.port or 80, timeout=30)
    headers = {"Content-Type": "application/json", "Host": host or f"{u.hostname}:{u.port}"}
    lat: list[float] = []
    codes: dict[str, int] = {}
    for body in bodies:
        if time.perf_counter() > deadline:
            break
        t0 = time.perf_counter()
        try:
            conn.request("POST", "/", body=body, headers=headers)
            resp = conn.getresponse()
            data = resp.read()
        except (OSError, http.client.HTTPException):
            conn.close()
            conn = http.client.HTTPConnection(u.hostname, u.port or 80, timeout=30)
            codes["CONNECTION_ERROR"] = codes.get("CONNECTION_ERROR", 0) + 1
            continue
        lat.append(time.perf_counter() - t0)
        code = "SUCCESS" if resp.status == 200 else json.loads(data).get("code", str(resp.status))
        codes[code] = codes.get(code, 0) + 1
    q.put((lat, codes))


def drive(url: str, host: str | None, bodies: list[bytes], clients: int, seconds: float) -> dict:
    """Split `bodies` over `clients` processes and run them at once."""
    chunks = [bodies[i::clients] for i in range(clients)]
    q: mp.Queue = mp.Queue()
    ctx_start = time.perf_counter()
    deadline = ctx_start + seconds
    procs = [mp.Process(target=_worker, args=(url, host, c, deadline, q)) for c in chunks]
    for p in procs:
        p.start()
    results = [q.get() for _ in procs]
    for p in procs:
        p.join()
    elapsed = time.perf_counter() - ctx_start
    lat = sorted(x for r in results for x in r[0])
    codes: dict[str, int] = {}
    for _, c in results:
        for k, v in c.items():
            codes[k] = codes.get(k, 0) + v
    return summarize(lat, codes, elapsed, clients)


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


def scenario_two_way_private(world: World, args) -> tuple[list[bytes], dict]:
    return gen_two_way(world, args.requests), {}


def scenario_query_pending_ack(world: World, args) -> tuple[list[bytes], dict]:
    """Fill queues, then alternate QUERY_PENDING_EVENTS (page of 10) and ACK of a real page."""
    seed = gen_two_way(world, min(args.requests, 5000))
    drive(args.url, args.host, seed, min(args.clients, 8), 300)
    bodies = []
    # ACK ids are those currently pending: fetch them through the protocol, then pre-sign.
    for r in world.recipients:
        page = world.client.pending_events(r, page_size=100)
        ids = [e["id"] for e in page["pending_events"]]
        for i in range(0, len(ids), 10):
            bodies.append(canonical_bytes(r.sign_command(recipient_did=world.client.did, payload={"type": "QUERY_PENDING_EVENTS", "pagination": {"page": 0, "page_size": 10}})))
            bodies.append(canonical_bytes(r.sign_command(recipient_did=world.client.did, payload={"type": "ACKNOWLEDGE_PENDING_EVENTS", "event_ids": ids[i : i + 10]})))
    return bodies, {}


def _event(who: Identity, other: Identity, i: int, tags: list[str]) -> dict:
    return {
        "sender_did": who.did,
        "recipient_did": other.did,
        "timestamp": 1_700_000_000 + i,
        "payload": "B" * 200,
        "encrypted_tags": tags,
    }


def scenario_save_events(world: World, args) -> tuple[list[bytes], dict]:
    tag_cache = {r.did: [r.tag(f"chat.{k}") for k in range(10)] for r in world.recipients}
    rec = world.recipients

    def payload(i, who):
        other = world.senders[rec.index(who)]
        return {"type": "SAVE_EVENTS", "events": [_event(who, other, i * 10 + j, [tag_cache[who.did][(i + j) % 10]]) for j in range(10)]}

    return gen_direct(world, rec, args.requests, payload), {"events_per_command": 10}


def scenario_query_events_by_tag(world: World, args) -> tuple[list[bytes], dict]:
    """Seed `--stored` events (through SAVE_EVENTS, 100 per command), then query by a tag."""
    rec = world.recipients
    tags = {r.did: [r.tag(f"t{k}") for k in range(1000)] for r in rec}
    per_cmd = 100
    total_cmds = args.stored // per_cmd

    def seed_payload(i, who):
        other = world.senders[rec.index(who)]
        return {"type": "SAVE_EVENTS", "events": [_event(who, other, i * per_cmd + j, [tags[who.did][(i * per_cmd + j) % 1000]]) for j in range(per_cmd)]}

    if total_cmds:
        done = 0
        batch = 2000
        while done < total_cmds:
            n = min(batch, total_cmds - done)
            bodies = gen_direct(world, rec, n, lambda i, who, base=done: seed_payload(base + i, who))
            res = drive(args.url, args.host, bodies, min(args.clients, 8), 600)
            done += n
            print(f"seeded {done * per_cmd} events ({res['throughput_rps']} cmd/s)", file=sys.stderr)

    def q(i, who):
        return {"type": "QUERY_EVENTS", "filter": {"encrypted_tags": [tags[who.did][i % 1000]]}, "pagination": {"page": 0, "page_size": 10}}

    return gen_direct(world, rec, args.requests, q), {"stored_events": args.stored}


SCENARIOS = {
    "two_way_private": scenario_two_way_private,
    "query_pending_ack": scenario_query_pending_ack,
    "save_events": scenario_save_events,
    "query_events_by_tag": scenario_query_events_by_tag,
}


def markdown_row(name: str, r: dict) -> str:
    return f"| {name} | {r['clients']} | {r['requests']} | {r['throughput_rps']} | {r['p50_ms']} | {r['p95_ms']} | {r['p99_ms']} | {r['codes']} |"


def main(argv: list[str] | None = None) -> dict:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--url", default="http://127.0.0.1:8000")
    ap.add_argument("--host", default=None, help="Host header (tenant) if it differs from the URL")
    ap.add_argument("--scenario", choices=sorted(SCENARIOS), default="two_way_private")
    ap.add_argument("--clients", type=int, default=16)
    ap.add_argument("--pairs", type=int, default=32)
    ap.add_argument("--requests", type=int, default=20_000)
    ap.add_argument("--seconds", type=float, default=20)
    ap.add_argument("--stored", type=int, default=0, help="events to seed for query_events_by_tag")
    ap.add_argument("--runs", type=int, default=1)
    ap.add_argument("--json", dest="json_out", default=None)
    args = ap.parse_args(argv)
    world = build_world(args.url, args.host, args.pairs)
    runs = []
    for _ in range(args.runs):
        bodies, extra = SCENARIOS[args.scenario](world, args)
        res = drive(args.url, args.host, bodies, args.clients, args.seconds)
        res.update(extra)
        runs.append(res)
        print(json.dumps(res), file=sys.stderr)
    med = {k: statistics.median(r[k] for r in runs) for k in ("throughput_rps", "p50_ms", "p95_ms", "p99_ms")}
    report = {"scenario": args.scenario, "runs": runs, "median": med, "clients": args.clients, "pid": os.getpid(), "id": str(uuid.uuid4())}
    print(json.dumps(report, indent=2))
    print("\n| scenario | clients | requests | req/s | p50 ms | p95 ms | p99 ms | codes |\n|---|---|---|---|---|---|---|---|")
    for r in runs:
        print(markdown_row(args.scenario, r))
    if args.json_out:
        with open(args.json_out, "w") as fh:
            json.dump(report, fh, indent=2)
    return report


if __name__ == "__main__":
    main()
