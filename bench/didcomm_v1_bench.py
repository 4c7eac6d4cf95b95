"""DIDComm v1: routing/1.0 forwards per second against Decentrl's TWO_WAY_PRIVATE on
the production layout, and forward-to-live-push latency over live v1 sockets (Pickup 2.0 live mode).
The v1 sibling of bench/didcomm_bench.py (its layout, load generator, CPU accounting and socket
stamping, alternation and summary are reused, not copied).

    .venv/bin/python -m bench.didcomm_v1_bench forwards --alternations 3 --seconds 10   # ~4 min
    .venv/bin/python -m bench.didcomm_v1_bench push --live 200 --sends 200              # ~2 min

`forwards`: a fresh database, the production layout (scripts/run_production.sh: nginx → Granian,
Daphne, no Celery, metering on, rate limits off), a Decentrl world (bench/loadgen.py: 64 pairs with
contracts) and a DIDComm v1 world built through the protocol: 64 Aries agents, each with a
connection (DID Exchange 1.1, did:peer:4 with no http(s) endpoint: Credo's case, messages are kept
for pickup), granted mediation (CM 1.0) and one recipient key registered (keylist-update). Every
forward is built before the run: a fresh `routing/1.0/forward` (`to` = the recipient's base58
verkey, as ACA-Py sends it) around a fixed RFC 0019 envelope for the recipient with a 256-byte body
(TWO_WAY_PRIVATE's payload), packed as an **anoncrypt** v1 envelope to the mediator's routing key,
so the load generator only sends bytes (`POST /didcomm`, `application/didcomm-envelope-enc`, 200 =
success). Then `--alternations` rounds of one run of each kind at `--clients` (the order flips every
round): req/s, p50/p99, server and PostgreSQL CPU ms per request, v1 / TWO_WAY_PRIVATE ratios.

`push`: the production layout again; `--live` v1 agents, each connected, granted, with a recipient
key and one socket on /didcomm/ws through nginx in Pickup 2.0 live mode (`live-delivery-change`,
binary frames as Credo sends them). One forward at a time (`--pause-ms` apart) to the next live
recipient in turn, over a keep-alive connection to nginx; the agent's socket stamps the pushed
Pickup 2.0 `delivery` (the first is unpacked to check it carries one attachment). request→frame =
from just before the POST to the frame; response→frame = from the 200 to the frame.

JSON + Markdown under bench/results/didcomm-v1-<part>-<UTC time>.*
"""

from __future__ import annotations

import asyncio
import http.client
import json
import os
import statistics
import sys
import time
import uuid
from base64 import urlsafe_b64decode
from concurrent.futures import ThreadPoolExecutor
from datetime import UTC, datetime

import httpx

from apps.didcomm.core import did_peer, envelope_v1
from apps.didcomm.core.did_peer import peer4_didcomm_v1
from apps.didcomm.core.keys import ED25519, PrivateKey
from apps.didcomm.core.message_v1 import key_to_verkey
from apps.wire.encoding import b58encode
from bench import didcomm_bench as v2
from bench import loadgen
from bench.run_standard import Layout, machine, prepare_database

BASE = "https://didcomm.org/"
CM1 = BASE + "coordinate-mediation/1.0/"
PICKUP2 = BASE + "messagepickup/2.0/"
FORWARD = BASE + "routing/1.0/forward"
ENVELOPE = "application/didcomm-envelope-enc"
QUEUE_ENDPOINT = "didcomm:transport/queue"  # what an agent without inbound transport (Credo) publishes


class V1Agent:
    """An Aries agent on apps/didcomm/core only: an Ed25519 key and its did:peer:4."""

    def __init__(self) -> None:
        self.key = PrivateKey.generate(ED25519)
        self.verkey = b58encode(self.key.public.raw)
        self.did_key = "did:key:" + self.key.public.multibase
        self.did = peer4_didcomm_v1(self.key.public, [QUEUE_ENDPOINT])

    def message(self, type_: str, **fields) -> dict:
        return {"@type": type_, "@id": str(uuid.uuid4()), "~transport": {"return_route": "all"}, **fields}

    def pack(self, message: dict, to_verkey: str) -> bytes:
        env = envelope_v1.pack(json.dumps(message).encode(), to_verkeys=[to_verkey], sender=self.key)
        return json.dumps(env).encode()

    def unpack(self, body: bytes | str) -> dict:
        out = envelope_v1.unpack(json.loads(body), private_key_for=lambda kid: self.key if kid == self.verkey else None)
        return json.loads(out.message)


class V1Mediator:
    """A DIDComm v1 mediator's inbound HTTP endpoint, used as an Aries agent does: its OOB 1.1 invitation's
    key for the connection, the grant's routing key for forwards. `invitation` defaults to this product's
    (GET /didcomm/invitation?version=1); a peer mediator's is given with `path` its endpoint's path."""

    def __init__(self, url: str, host: str, invitation: dict | None = None, path: str = "/didcomm"):
        self.url, self.host, self.path = url, host, path
        if invitation is None:
            with httpx.Client(base_url=url, headers={"Host": host}, timeout=30) as c:
                invitation = c.get("/didcomm/invitation", params={"version": "1"}).json()
        self.invitation = invitation
        self.verkey = key_to_verkey(invitation["services"][0]["recipientKeys"][0])
        self.routing_verkey = self.verkey  # until a grant names the routing key

    def send(self, client: httpx.Client, agent: V1Agent, message: dict, to: str | None = None) -> dict:
        """`message` packed to `to` (default the invitation's key) on a return route; the answer unpacked."""
        body = agent.pack(message, to or self.verkey)
        resp = client.post(self.path, content=body, headers={"Content-Type": ENVELOPE})
        if resp.status_code != 200 or not resp.content:
            raise RuntimeError(f"{message['@type']}: {resp.status_code} {resp.text[:200]}")
        return agent.unpack(resp.content)


def b64decode(value: str) -> bytes:
    """Base64 with or without padding, standard or URL-safe alphabet."""
    return urlsafe_b64decode(value.replace("+", "-").replace("/", "_") + "=" * (-len(value) % 4))


def connection_verkey(response: dict, default: str) -> str:
    """The key a DID Exchange response names for the connection (its DID's, or its attached document's
    first recipient key), or `default` (the invitation's key) when it names none."""
    did = response.get("did", "")
    if did.startswith("did:peer:4"):
        doc = did_peer.peer4_document_json(did)
    elif did.startswith("did:peer:2"):
        doc = did_peer.peer2_document_json(did)
    elif "did_doc~attach" in response:
        doc = json.loads(b64decode(response["did_doc~attach"]["data"]["base64"]))
    else:
        return default
    key = doc["service"][0]["recipientKeys"][0]
    if key.startswith("did:key:"):
        return key_to_verkey(key.split("#")[0])
    if "#" in key:  # a reference to one of the document's verification methods, wherever it is listed
        methods = [m for f in ("verificationMethod", "publicKey", "authentication") for m in doc.get(f) or []]
        vm = next(m for m in methods if isinstance(m, dict) and m["id"].endswith("#" + key.split("#")[1]))
        if "publicKeyBase58" in vm:
            return vm["publicKeyBase58"]
        return key_to_verkey("did:key:" + vm["publicKeyMultibase"])
    return key


def granted_agents(med: V1Mediator, n: int, threads: int = 4) -> list[tuple[V1Agent, V1Agent]]:
    """`n` (agent, recipient key) pairs: connected (DID Exchange 1.1), granted (CM 1.0), the key added."""

    def one(_: int) -> tuple[V1Agent, V1Agent]:
        agent, rcpt = V1Agent(), V1Agent()
        with httpx.Client(base_url=med.url, headers={"Host": med.host}, timeout=60) as c:
            request = agent.message(BASE + "didexchange/1.1/request", label="bench", did=agent.did)
            request["~thread"] = {"thid": request["@id"], "pthid": med.invitation["@id"]}
            response = med.send(c, agent, request)
            assert response["@type"] == BASE + "didexchange/1.1/response", response
            their = connection_verkey(response, med.verkey)
            complete = {"@type": BASE + "didexchange/1.1/complete", "@id": str(uuid.uuid4()),
                        "~thread": {"thid": request["@id"], "pthid": med.invitation["@id"]}}  # fmt: skip
            c.post(med.path, content=agent.pack(complete, their), headers={"Content-Type": ENVELOPE})
            grant = med.send(c, agent, agent.message(CM1 + "mediate-request"), to=their)
            assert grant["@type"] == CM1 + "mediate-grant", grant
            if grant.get("routing_keys"):
                med.routing_verkey = key_to_verkey(grant["routing_keys"][0].split("#")[0])
            update = agent.message(CM1 + "keylist-update", updates=[{"recipient_key": rcpt.did_key, "action": "add"}])
            assert med.send(c, agent, update, to=their)["updated"][0]["result"] == "success"
        return agent, rcpt

    with ThreadPoolExecutor(threads) as pool:
        return list(pool.map(one, range(n)))


def inner_for(rcpt: V1Agent, payload_bytes: int = 256) -> dict:
    """The opaque envelope a sender forwards: anoncrypt to the recipient, a body of `payload_bytes`."""
    msg = {"@type": BASE + "basicmessage/1.0/message", "@id": str(uuid.uuid4()), "content": "A" * payload_bytes}
    return envelope_v1.pack(json.dumps(msg).encode(), to_verkeys=[rcpt.verkey])


def forwards(med: V1Mediator, targets: list[tuple[V1Agent, dict]], n: int) -> list[bytes]:
    """n fresh routing/1.0 forwards (anoncrypt to the grant's routing key), round-robin over (recipient, inner)."""
    out = []
    for i in range(n):
        rcpt, inner = targets[i % len(targets)]
        fwd = {"@type": FORWARD, "@id": str(uuid.uuid4()), "to": rcpt.verkey, "msg": inner}
        out.append(json.dumps(envelope_v1.pack(json.dumps(fwd).encode(), to_verkeys=[med.routing_verkey])).encode())
    return out


def _report(part: str) -> dict:
    started = datetime.now(UTC).strftime("%Y%m%dT%H%M%SZ")
    return {"started": started, "command": f"python -m bench.didcomm_v1_bench {' '.join(sys.argv[1:])}",
            "machine": machine(), "part": part, "runs": []}  # fmt: skip


# --- forwards per second ---------------------------------------------------------------------------


def run_forwards(args) -> dict:
    report = _report("forwards")
    la = v2._layout_args(args)
    print(f"== fresh database {args.db}", file=sys.stderr)
    prepare_database(la)
    layout = Layout(la)
    try:
        world = loadgen.build_world(layout.url, layout.host, args.pairs)
        med = V1Mediator(layout.url, layout.host)
        agents = granted_agents(med, args.pairs)
        targets = [(rcpt, inner_for(rcpt)) for _, rcpt in agents]
        print(f"== worlds: {args.pairs} Decentrl pairs, {args.pairs} DIDComm v1 agents", file=sys.stderr)
        kinds = {
            "v1_forward": lambda n: forwards(med, targets, n),
            "two_way_private": lambda n: loadgen.gen_two_way(world, n),
        }
        target = {"v1_forward": {"path": "/didcomm", "content_type": ENVELOPE, "ok_status": 200}, "two_way_private": {}}
        sample = forwards(med, targets, 1)[0]
        report["forward_body_bytes"] = len(sample)
        v2.alternate(layout, args, kinds, target, report)
    finally:
        layout.stop()
    runs = report["runs"]
    summary = report["summary"] = v2.forwards_summary(runs, "v1_forward")
    rate, cpu = summary["rate_ratio_per_round"], summary["cpu_ratio_per_round"]
    md = [f"# didcomm v1 forwards — {report['started']}", "", "Command: `" + report["command"] + "`", "",
          "| round | kind | req/s | p50 ms | p99 ms | server CPU ms/req (by process) | PG CPU ms/req | client share "
          "| other share | load avg | codes |", "|---|---|---|---|---|---|---|---|---|---|---|"]  # fmt: skip
    for r in runs:
        by = ", ".join(f"{k} {v}" for k, v in r["by_process"].items() if v)
        md.append(f"| {r['round']} | {r['kind']} | {r['throughput_rps']} | {r['p50_ms']} | {r['p99_ms']} "
                  f"| {r['server_cpu_ms_per_req']} ({by}) | {r['postgres_cpu_ms_per_req']} | {r['client_cpu_share']} "
                  f"| {r['other_cpu_share']} | {', '.join(f'{x:.1f}' for x in r['loadavg'])} | {r['codes']} |")  # fmt: skip
    md += ["", f"v1 / TWO_WAY_PRIVATE req/s per round {rate}, median **{summary['rate_ratio_median']}**; "
           f"CPU per request (server + PostgreSQL) TWO_WAY_PRIVATE / v1 per round {cpu}, median "
           f"**{summary['cpu_ratio_median']}**", "", "```", json.dumps(summary, indent=1), "```"]  # fmt: skip
    v2._save("v1-forwards", report, "\n".join(md) + "\n")
    return report


# --- forward-to-live-push latency ------------------------------------------------------------------


async def _open_live(ws_url: str, port: int, med: V1Mediator, agent: V1Agent):
    from websockets.asyncio.client import connect

    ws = await connect(ws_url, host="127.0.0.1", port=port, compression=None, proxy=None, ping_interval=None,
                       open_timeout=60, max_size=None)  # fmt: skip
    await ws.send(agent.pack(agent.message(PICKUP2 + "live-delivery-change", live_delivery=True), med.verkey))
    status = agent.unpack(await asyncio.wait_for(ws.recv(), 60))
    if status["@type"] != PICKUP2 + "status" or status.get("live_delivery") is not True:
        raise RuntimeError(f"live mode refused: {status}")
    return ws


async def _measure_push(layout, args) -> dict:
    med = V1Mediator(layout.url, layout.host)
    t0 = time.perf_counter()
    agents = await asyncio.to_thread(granted_agents, med, args.live, args.setup_threads)
    setup_s = time.perf_counter() - t0
    port = int(layout.url.rsplit(":", 1)[1])
    ws_url = f"ws://{layout.host}/didcomm/ws"
    sem = asyncio.Semaphore(32)
    failures: dict[str, int] = {}

    async def one(agent):
        async with sem:
            try:
                return await _open_live(ws_url, port, med, agent)
            except Exception as exc:  # noqa: BLE001 - counted
                failures[type(exc).__name__] = failures.get(type(exc).__name__, 0) + 1
                return None

    socks = await asyncio.gather(*(one(a) for a, _ in agents))
    live = [(i, s) for i, s in enumerate(socks) if s is not None]
    stamps = v2.Stamps()
    readers = [stamps.start(i, s) for i, s in live]
    targets = [(i, agents[i][1]) for i, _ in live]
    inners = {i: inner_for(r) for i, r in targets}
    bodies = [
        forwards(med, [(r, inners[i])], 1)[0] for k in range(args.sends + 10) for i, r in [targets[k % len(targets)]]
    ]
    conn = http.client.HTTPConnection("127.0.0.1", port, timeout=30)
    headers = {"Content-Type": ENVELOPE, "Host": layout.host}
    req_frame, resp_frame, statuses = [], [], {}
    sample = None
    try:
        for k, body in enumerate(bodies):
            i = targets[k % len(targets)][0]
            seen = len(stamps.frames[i])
            t_req = time.perf_counter()
            status = await asyncio.to_thread(v2._post, conn, body, headers)
            t_resp = time.perf_counter()
            statuses[status] = statuses.get(status, 0) + 1
            t_frame, frame = await stamps.next(i, seen)
            if sample is None:
                sample = frame
            if k >= 10:
                req_frame.append((t_frame - t_req) * 1000)
                resp_frame.append((t_frame - t_resp) * 1000)
            await asyncio.sleep(args.pause_ms / 1000)
        # What was pushed is a Pickup 2.0 delivery of one stored message, authcrypt to the agent.
        delivery = agents[targets[0][0]][0].unpack(sample)
        check = {"type": delivery["@type"], "attachments": len(delivery.get("~attach", [])),
                 "binary_frame": isinstance(sample, bytes)}  # fmt: skip
    finally:
        conn.close()
        for t in readers:
            t.cancel()
        await asyncio.gather(*(s.close() for _, s in live), return_exceptions=True)
    return {
        "live_sockets": len(live),
        "open_failures": failures,
        "setup_s": round(setup_s, 1),
        "sends": len(req_frame),
        "statuses": statuses,
        "first_push": check,
        "req_to_frame_p50_ms": round(v2._pct(req_frame, 50), 2),
        "req_to_frame_p99_ms": round(v2._pct(req_frame, 99), 2),
        "req_to_frame_max_ms": round(max(req_frame), 2),
        "resp_to_frame_p50_ms": round(v2._pct(resp_frame, 50), 2),
        "resp_to_frame_p99_ms": round(v2._pct(resp_frame, 99), 2),
        "push_before_response": sum(1 for v in resp_frame if v < 0),
        "loadavg": os.getloadavg(),
    }


def run_push(args) -> dict:
    v2.raise_nofile()
    report = _report("push")
    la = v2._layout_args(args)
    prepare_database(la)
    layout = Layout(la)
    try:
        for r in range(args.runs):
            res = asyncio.run(_measure_push(layout, args))
            res["run"] = r + 1
            report["runs"].append(res)
            print(json.dumps(res), file=sys.stderr)
    finally:
        layout.stop()
    keys = ("req_to_frame_p50_ms", "req_to_frame_p99_ms", "resp_to_frame_p50_ms", "resp_to_frame_p99_ms")
    report["median"] = {k: statistics.median(r[k] for r in report["runs"]) for k in keys}
    md = [f"# didcomm v1 push — {report['started']}", "", "Command: `" + report["command"] + "`", "",
          "| run | live sockets | sends | request→frame p50 | p99 | max | response→frame p50 | p99 | push before 200 "
          "| load avg |", "|---|---|---|---|---|---|---|---|---|---|"]  # fmt: skip
    for r in report["runs"]:
        md.append(f"| {r['run']} | {r['live_sockets']} | {r['sends']} | {r['req_to_frame_p50_ms']} | "
                  f"{r['req_to_frame_p99_ms']} | {r['req_to_frame_max_ms']} | {r['resp_to_frame_p50_ms']} | "
                  f"{r['resp_to_frame_p99_ms']} | {r['push_before_response']} | "
                  f"{', '.join(f'{x:.1f}' for x in r['loadavg'])} |")  # fmt: skip
    md += ["", "medians: " + json.dumps(report["median"])]
    v2._save("v1-push", report, "\n".join(md) + "\n")
    return report


def main(argv: list[str] | None = None) -> None:
    ap, _ = v2.parts_parser(
        __doc__, db="mediator_bench_didcomm_v1", port=8350, live=200, live_help="live v1 agents, one socket each"
    )
    args = ap.parse_args(argv)
    os.environ.setdefault("DJANGO_SETTINGS_MODULE", "mediator_project.settings")
    {"forwards": run_forwards, "push": run_push}[args.part](args)


if __name__ == "__main__":
    main()
