"""What the channels_redis adapter buys: CPU per push to a group with one socket through the adapter
(`SyncSender`, what the process's pusher thread does per push: the members lookup, then the send)
against channels_redis's public `RedisChannelLayer.group_send` awaited on one long-lived event loop
thread (the best a synchronous caller can do with the public coroutine: no new loop or connection
per push), one process, the two taking turns round by round.

    .venv/bin/python -m bench.push_bench                    # 6 rounds of 3,000 pushes each
    .venv/bin/python -m bench.push_bench --rounds 2 --pushes 1000

Both write the same entry into the same channel's list (checked before timing), on the same Redis
(BENCH_REDIS_URL, default redis://127.0.0.1:6379/12, keys under a prefix of the bench's own, deleted
after each round). Reported per round: µs of this process's CPU per push (every thread, so the
loop thread's share counts) and µs of Redis's CPU per push (INFO cpu), and the median of the
per-round ratios public / adapter of their sum.

JSON + Markdown under bench/results/push-<UTC time>.*
"""

from __future__ import annotations

import argparse
import asyncio
import os
import statistics
import threading
import time
import uuid
from collections.abc import Callable
from datetime import UTC, datetime

import redis
from channels_redis.core import RedisChannelLayer

from apps.realtime.channels_redis_adapter import SyncSender
from bench import write_results

ADAPTER, PUBLIC = "adapter", "public group_send"
MESSAGE = {"type": "realtime.push", "group": "", "text": "x" * 200}


def _redis_cpu(client: redis.Redis) -> float:
    info = client.info("cpu")
    return float(info["used_cpu_sys"]) + float(info["used_cpu_user"])


def _contenders(layer: RedisChannelLayer) -> tuple[dict[str, Callable[[str], None]], Callable[[], None]]:
    """Each contender's push of MESSAGE to a group, and a stop for the public path's loop."""
    sender = SyncSender(layer)
    loop = asyncio.new_event_loop()
    thread = threading.Thread(target=loop.run_forever, daemon=True)
    thread.start()

    def adapter(group: str) -> None:
        members = sender.members(group)
        if members:
            sender.send(group, members, {**MESSAGE, "group": group})

    def public(group: str) -> None:
        asyncio.run_coroutine_threadsafe(layer.group_send(group, {**MESSAGE, "group": group}), loop).result()

    def stop() -> None:
        loop.call_soon_threadsafe(loop.stop)
        thread.join()

    return {ADAPTER: adapter, PUBLIC: public}, stop


def _join(layer: RedisChannelLayer, group: str) -> str:
    async def body() -> str:
        channel = await layer.new_channel()
        await layer.group_add(group, channel)
        return channel

    return asyncio.run(body())


def _round(push: Callable[[str], None], group: str, n: int, client: redis.Redis, key: str) -> tuple[float, float]:
    """µs of process CPU and of Redis CPU per push over `n` pushes."""
    redis_before = _redis_cpu(client)
    started = time.process_time()
    for _ in range(n):
        push(group)
    process_us = (time.process_time() - started) / n * 1e6
    redis_us = (_redis_cpu(client) - redis_before) / n * 1e6
    client.delete(key)
    return process_us, redis_us


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--rounds", type=int, default=6)
    parser.add_argument("--pushes", type=int, default=3000)
    parser.add_argument("--redis-url", default=os.environ.get("BENCH_REDIS_URL", "redis://127.0.0.1:6379/12"))
    args = parser.parse_args(argv)

    prefix = f"benchpush{uuid.uuid4().hex[:8]}"
    layer = RedisChannelLayer(hosts=[args.redis_url], prefix=prefix, capacity=args.pushes * 2)
    client = redis.Redis.from_url(args.redis_url)
    group = "push-bench"
    channel = _join(layer, group)
    key = layer.prefix + layer.non_local_name(channel)
    contenders, stop = _contenders(layer)
    try:
        entries = {}
        for name, push in contenders.items():  # warm-up, and both write the same entry
            push(group)
            # What the channel's consumer would receive (the layer's serializer drops its random prefix).
            entries[name] = [layer.deserialize(m) for m in client.zrange(key, 0, -1)]
            client.delete(key)
            _round(push, group, 200, client, key)
        if entries[ADAPTER] != entries[PUBLIC] or len(entries[ADAPTER]) != 1:
            raise SystemExit("the two paths write differently")

        rows = []
        for i in range(args.rounds):
            order = list(contenders) if i % 2 == 0 else list(reversed(contenders))
            per = {name: _round(contenders[name], group, args.pushes, client, key) for name in order}
            rows.append(per)
            print(
                f"round {i + 1}: " + ", ".join(f"{k} {p:.1f} µs + Redis {r:.1f} µs" for k, (p, r) in per.items()),
                flush=True,
            )
    finally:
        stop()
        for k in client.scan_iter(f"{prefix}*"):
            client.delete(k)
    ratios = [sum(r[PUBLIC]) / sum(r[ADAPTER]) for r in rows]
    summary = {
        "when": datetime.now(UTC).isoformat(timespec="seconds"),
        "pushes_per_round": args.pushes,
        "rounds": [{k: {"process_us": p, "redis_us": r} for k, (p, r) in row.items()} for row in rows],
        "public_over_adapter": ratios,
        "median_ratio": statistics.median(ratios),
        "load_average": os.getloadavg(),
    }
    lines = [
        "| round | adapter µs/push (process + Redis) | public group_send µs/push (process + Redis) | ratio |",
        "|---|---|---|---|",
        *(
            f"| {i + 1} | {r[ADAPTER][0]:.0f} + {r[ADAPTER][1]:.0f} | {r[PUBLIC][0]:.0f} + {r[PUBLIC][1]:.0f} | {q:.2f} |"
            for i, (r, q) in enumerate(zip(rows, ratios, strict=True))
        ),
        f"\npublic group_send / adapter, CPU per push, median of the rounds: **{summary['median_ratio']:.2f}×**",
    ]
    write_results("push", summary, lines)


if __name__ == "__main__":
    main()
