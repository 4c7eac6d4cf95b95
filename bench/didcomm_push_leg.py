"""The DIDComm live push leg alone (issue 15 §7): from the commit of a stored message to its
`delivery` frame on a live socket, in one process, and the CPU of building one push.

    .venv/bin/python -m bench.didcomm_push_leg --db mediator_bench_pushleg --pushes 200   # ~1 min

One process, no nginx, gunicorn or Redis: the real consumer (`mediator_project.asgi`) behind
channels' WebsocketCommunicator, the in-memory channel layer, PostgreSQL. A granted wallet with one
recipient goes live; each push is a `services.forward_store` in a transaction (a ~1.4 KB stored
attachment, as `push` forwards), timed from the first after-commit callback (right before the
wake's send) to the frame. `build`: the CPU (thread time) of what the consumer does per push, 200
times. Run with an older tree (the same command there) to compare: the script uses
`dispatch.live_delivery_frame` (the database path) when the tree has it.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import statistics
import time
from types import SimpleNamespace

from bench.run_standard import prepare_database, server_env

T0: list[float] = []


def _pct(vals: list[float], p: float) -> float:
    s = sorted(vals)
    return round(s[min(len(s) - 1, max(0, int(round(p / 100 * len(s) + 0.5)) - 1))], 2)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--db", default="mediator_bench_pushleg")
    ap.add_argument("--port", type=int, default=9210, help="names the bootstrapped tenant's host only")
    ap.add_argument("--pushes", type=int, default=200)
    ap.add_argument("--var-dir", default="/tmp/mediator_bench_pushleg", help="deployment key (same for both trees)")
    ap.add_argument("--keep-db", action="store_true", help="reuse the database (another tree made it)")
    args = ap.parse_args()
    layout = SimpleNamespace(db=args.db, redis_url="", port=args.port, env=[f"MEDIATOR_VAR_DIR={args.var_dir}"])
    if not args.keep_db:
        prepare_database(layout)
    env = server_env(layout)
    env["REDIS_URL"] = ""  # the in-memory channel layer: the push leg without Redis
    os.environ.update(env)
    import django

    django.setup()
    print(json.dumps(asyncio.run(_run(args)) | {"build": _build(), "loadavg": os.getloadavg()}))


def _world():
    from apps.didcomm import services
    from apps.didcomm.core.agent import Agent
    from apps.tenants.models import Tenant
    from bench.didcomm_bench import inner_for

    tenant = Tenant.objects.order_by("pk").first()
    wallet, rcpt = Agent(), Agent()
    mediation = services.mediation_request(tenant=tenant, client_did=wallet.did)
    services.recipients_update(
        mediation=mediation, updates=[{"recipient_did": rcpt.did, "action": "add"}], proof=frozenset()
    )
    return SimpleNamespace(
        tenant=tenant,
        wallet=wallet,
        next_did=rcpt.did,
        policy=services.policy_for(tenant=tenant),
        mediator=services.identity_current(tenant=tenant).did,
        data={"json": inner_for(rcpt)},
    )


def _store(w) -> str:
    from django.db import transaction

    from apps.didcomm import services

    with transaction.atomic():
        # The first after-commit callback: runs right before the store's own (the wake's send).
        transaction.on_commit(lambda: T0.append(time.perf_counter()))
        return services.forward_store(tenant=w.tenant, policy=w.policy, next_did=w.next_did, data=w.data).message_id


async def _run(args) -> dict:
    from asgiref.sync import sync_to_async
    from channels.testing import WebsocketCommunicator

    from apps.didcomm.core.agent import PICKUP
    from mediator_project.asgi import application

    w = await sync_to_async(_world)()
    comm = WebsocketCommunicator(application, "/didcomm/ws", headers=[(b"host", f"localhost:{args.port}".encode())])
    assert (await comm.connect())[0]
    live = w.wallet.message(PICKUP + "live-delivery-change", {"live_delivery": True})
    await comm.send_to(text_data=w.wallet.pack(live, w.mediator).decode())
    await comm.receive_from(30)
    lat = []
    for i in range(args.pushes + 10):
        await sync_to_async(_store, thread_sensitive=False)(w)
        frame = await comm.receive_from(30)
        if i >= 10:
            lat.append((time.perf_counter() - T0[-1]) * 1000)
    delivery, _ = w.wallet.unpack(frame.encode())
    assert delivery["type"] == PICKUP + "delivery" and len(delivery["attachments"]) == 1
    await comm.disconnect()
    return {"pushes": len(lat), "p50_ms": _pct(lat, 50), "p90_ms": _pct(lat, 90), "p99_ms": _pct(lat, 99),
            "max_ms": round(max(lat), 2)}  # fmt: skip


def _build() -> dict:
    """CPU and wall of one push's work in the consumer, median of 200 (after 20 warm-up)."""
    from apps.didcomm import dispatch, services
    from apps.didcomm.core.resolver import resolve_did

    w = _world()
    kid = resolve_did(w.wallet.did).key_agreement[0].id
    mid = _store(w)
    if hasattr(dispatch, "live_delivery_frame"):  # the tree before issue 15 §7's push work
        what = "live_delivery_frame: 3-4 queries + pack"

        def build():
            return dispatch.live_delivery_frame(tenant=w.tenant, client_did=w.wallet.did, client_kid=kid, ids=[mid])
    else:
        from apps.didcomm.consumers import _rows

        what = "wake parse + frame: no database"
        text = json.dumps(w.data, separators=(",", ":"))
        wake = json.dumps({"type": services.WAKE, "ids": [mid], "items": [{"id": mid, "data": text}]})
        target, _ = dispatch.live_start(tenant=w.tenant, client_did=w.wallet.did, client_kid=kid, backlog=False)

        def build():
            return target.frame(_rows(json.loads(wake)))

    cpu, wall = [], []
    for i in range(220):
        c0, w0 = time.thread_time(), time.perf_counter()
        build()
        if i >= 20:
            cpu.append((time.thread_time() - c0) * 1000)
            wall.append((time.perf_counter() - w0) * 1000)
    return {"what": what, "cpu_ms": round(statistics.median(cpu), 3), "wall_ms": round(statistics.median(wall), 3)}


if __name__ == "__main__":
    main()
