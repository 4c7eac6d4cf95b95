"""Per-push worker CPU and latency: the channels_redis adapter against the channel layer's public API.

What a gunicorn worker does after a TWO_WAY_PRIVATE commits (apps/realtime/push.py), measured
single-threaded on the real `RedisChannelLayer` and Redis, three ways, alternately:

- `adapter`: `apps.realtime.channels_redis_adapter.SyncSender` as `push_to_sockets` calls it (one
  blocking ZRANGEBYSCORE for the group's members, then, only when there are members, one
  pipelined round trip with the layer's capacity script);
- `loop`: the public API from sync code the cheapest way it can be called: `layer.group_send` on
  one long-lived background event loop of the process (`asyncio.run_coroutine_threadsafe`, the
  path `push_to_sockets` keeps for other layers);
- `async_to_sync`: `async_to_sync(layer.group_send)`, what the channels docs show for sync code
  (a new event loop per call in a plain WSGI thread, hence a new Redis connection per push).

Each in two cases: the recipient has no socket (most TWO_WAY_PRIVATE recipients) and one socket.
Results: bench/results/push_adapter-<UTC time>.json.
Worker CPU is `time.process_time()` of this process (every thread: the background loop's too),
per push; latency is the caller's wall time per push. Rounds alternate the order of the variants.

    .venv/bin/python -m bench.push_adapter_bench                  # 5 rounds x 2,000 pushes, ~1 min
    .venv/bin/python -m bench.push_adapter_bench --rounds 7 --n 3000 --redis-url redis://127.0.0.1:6379/13
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import statistics
import threading
import time
import uuid

os.environ.setdefault("DJANGO_SETTINGS_MODULE", "mediator_project.settings")

import django  # noqa: E402

django.setup()

import redis  # noqa: E402
from asgiref.sync import async_to_sync  # noqa: E402
from channels_redis.core import RedisChannelLayer  # noqa: E402

from apps.realtime.channels_redis_adapter import SyncSender  # noqa: E402
from apps.realtime.groups import group_name  # noqa: E402
from apps.realtime.push import PUSH_TYPE  # noqa: E402
from apps.wire.canonical import canonical_str  # noqa: E402

# A pending-event push as notify sends it (the payload is the size of the standard set's 256 bytes).
MESSAGE = {
    "type": "PENDING_EVENTS",
    "events": [{"id": str(uuid.uuid4()), "sender_did": "did:web:bench.example:alice", "payload": "x" * 344}],
}


def main(argv: list[str] | None = None) -> dict:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--n", type=int, default=2000, help="pushes per variant per round")
    ap.add_argument("--n-async-to-sync", type=int, default=300, help="pushes per round for async_to_sync (slow)")
    ap.add_argument("--rounds", type=int, default=5)
    ap.add_argument("--redis-url", default=os.environ.get("BENCH_REDIS_URL", "redis://127.0.0.1:6379/13"))
    args = ap.parse_args(argv)

    prefix = f"pushbench{uuid.uuid4().hex[:8]}:"
    layer = RedisChannelLayer(hosts=[{"address": args.redis_url}], prefix=prefix, capacity=10**6)
    adapter = SyncSender(layer)
    loop = asyncio.new_event_loop()
    threading.Thread(target=loop.run_forever, name="realtime-push", daemon=True).start()

    tenant_id = 1
    online_did, offline_did = "did:web:bench.example:online", "did:web:bench.example:offline"

    async def join():
        channel = await layer.new_channel()
        await layer.group_add(group_name(tenant_id, online_did), channel)
        return channel

    channel = asyncio.run_coroutine_threadsafe(join(), loop).result()
    raw = redis.Redis.from_url(args.redis_url)

    def via_adapter(group: str) -> None:
        members = adapter.members(group)
        if members:
            adapter.send(group, members, {"type": PUSH_TYPE, "text": canonical_str(MESSAGE)})

    def via_loop(group: str) -> None:
        msg = {"type": PUSH_TYPE, "text": canonical_str(MESSAGE)}
        asyncio.run_coroutine_threadsafe(layer.group_send(group, msg), loop).result(timeout=2)

    def via_async_to_sync(group: str) -> None:
        async_to_sync(layer.group_send)(group, {"type": PUSH_TYPE, "text": canonical_str(MESSAGE)})

    variants = {"adapter": via_adapter, "loop": via_loop, "async_to_sync": via_async_to_sync}
    cases = {"no socket": group_name(tenant_id, offline_did), "1 socket": group_name(tenant_id, online_did)}
    results: dict[str, dict[str, list]] = {}
    errors: dict[str, int] = {}
    names = list(variants)
    for r in range(args.rounds):
        order = names[r % len(names) :] + names[: r % len(names)]
        for case, group in cases.items():
            for name in order:
                fn = variants[name]
                n = args.n_async_to_sync if name == "async_to_sync" else args.n
                for _ in range(20):  # warm: connections, the script's SHA
                    fn(group)
                lat = []
                cpu0 = time.process_time()
                for _ in range(n):
                    t0 = time.perf_counter()
                    try:
                        fn(group)
                    except redis.ConnectionError:
                        # The Redis is shared: another test killing clients by command (as
                        # tests/realtime/test_sync_push.py does) drops ours; counted, not timed.
                        errors[name] = errors.get(name, 0) + 1
                        continue
                    lat.append(time.perf_counter() - t0)
                n = len(lat)
                cpu = (time.process_time() - cpu0) / n
                lat.sort()
                row = results.setdefault(f"{case} / {name}", {"cpu_us": [], "p50_us": [], "p99_us": []})
                row["cpu_us"].append(cpu * 1e6)
                row["p50_us"].append(lat[n // 2] * 1e6)
                row["p99_us"].append(lat[int(n * 0.99)] * 1e6)
                raw.delete(prefix + layer.non_local_name(channel))  # drop what the socket did not read
        print(f"round {r + 1}/{args.rounds} done", flush=True)
    for key in raw.scan_iter(match=f"{prefix}*"):
        raw.delete(key)

    medians = {k: {m: round(statistics.median(v), 1) for m, v in row.items()} for k, row in results.items()}
    out = {
        "n": args.n,
        "rounds": args.rounds,
        "loadavg": os.getloadavg(),
        "channels_redis": __import__("channels_redis").__version__,
        "medians": medians,
        "connection_errors": errors,
        "per_round_cpu_us": {k: [round(x, 1) for x in row["cpu_us"]] for k, row in results.items()},
    }
    print(json.dumps(out, indent=1))
    stamp = time.strftime("%Y%m%dT%H%M%SZ", time.gmtime())
    path = os.path.join(os.path.dirname(os.path.abspath(__file__)), "results", f"push_adapter-{stamp}.json")
    with open(path, "w") as fh:
        json.dump(out, fh, indent=1)
    print(f"results: {path}")
    print("\n| case / variant | worker CPU µs per push | p50 µs | p99 µs |\n|---|---|---|---|")
    for k, m in medians.items():
        print(f"| {k} | {m['cpu_us']} | {m['p50_us']} | {m['p99_us']} |")
    return out


if __name__ == "__main__":
    main()
