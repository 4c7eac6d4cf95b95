"""What keeping group memberships joined costs per socket (apps/realtime/groups.Memberships).

Every socket re-joins its groups every quarter of the layer's group expiry. This measures, for
`--sockets` sockets with two groups each (the tenant's and the DID's, as an authenticated /ws
socket has), in this one process:

- memory: tracemalloc's growth per socket joining through `Memberships` (a timer handle, the
  object, its set of groups) against joining through `layer.group_add` alone (what the layer
  itself keeps is in both);
- CPU: `time.process_time()` per socket for one refresh of both groups, all sockets' timers
  made due at once (the real ones are spread over the interval by connect time), on the
  in-memory layer and, with --redis, on channels_redis (two commands per group: ZADD, EXPIRE).

    .venv/bin/python -m bench.memberships_cost --sockets 10000 [--redis]
"""

from __future__ import annotations

import argparse
import asyncio
import gc
import os
import time
import tracemalloc
import uuid

os.environ.setdefault("DJANGO_SETTINGS_MODULE", "mediator_project.settings")

import django  # noqa: E402

django.setup()

from channels.layers import InMemoryChannelLayer  # noqa: E402
from channels_redis.core import RedisChannelLayer  # noqa: E402

from apps.realtime.groups import Memberships, group_name, tenant_group_name  # noqa: E402


async def measure(layer, n: int) -> dict:
    channels = [await layer.new_channel() for _ in range(n)]
    groups = [(tenant_group_name(1), group_name(1, f"did:bench:{i}")) for i in range(n)]
    # The layer's own state for every membership first, so both sides below add only their part.
    for channel, pair in zip(channels, groups, strict=True):
        for group in pair:
            await layer.group_add(group, channel)
    gc.collect()
    tracemalloc.start()
    before = tracemalloc.get_traced_memory()[0]
    kept = []
    for channel, pair in zip(channels, groups, strict=True):
        m = Memberships(layer, channel)
        for group in pair:
            await m.add(group)
        kept.append(m)
    gc.collect()
    per_socket_bytes = (tracemalloc.get_traced_memory()[0] - before) / n
    tracemalloc.stop()
    started = time.process_time()
    for m in kept:
        m._timer.cancel()
        m._timer = None
        await m._refresh()
    refresh_us = (time.process_time() - started) / n * 1e6
    for m in kept:
        await m.close()
    return {
        "sockets": n,
        "bytes_per_socket": round(per_socket_bytes),
        "refresh_cpu_us_per_socket": round(refresh_us, 1),
    }


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--sockets", type=int, default=10000)
    ap.add_argument("--redis", action="store_true")
    ap.add_argument("--redis-url", default=os.environ.get("BENCH_REDIS_URL", "redis://127.0.0.1:6379/13"))
    args = ap.parse_args()
    print("in-memory", asyncio.run(measure(InMemoryChannelLayer(), args.sockets)), f"load {os.getloadavg()[0]:.1f}")
    if args.redis:
        prefix = f"membench{uuid.uuid4().hex[:8]}"
        layer = RedisChannelLayer(hosts=[{"address": args.redis_url}], prefix=prefix)

        async def run():
            try:
                return await measure(layer, args.sockets)
            finally:
                conn = layer.connection(0)
                keys = [k async for k in conn.scan_iter(match=f"{prefix}*")]
                if keys:
                    await conn.delete(*keys)
                await layer.close_pools()

        print("redis", asyncio.run(run()), f"load {os.getloadavg()[0]:.1f}")


if __name__ == "__main__":
    main()
