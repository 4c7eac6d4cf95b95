"""Metering cost on the hot path: commands per second through the one dispatch path
(apps.decentrl.dispatch.handle, in-process, real PostgreSQL) with metering off, buffered (the
default) and sync (one INSERT per command).

    .venv/bin/python -m bench.metering_overhead [--commands 1000] [--rounds 5]

In-process on purpose: without HTTP in front, metering's share of each command is at its largest,
so the overhead measured here is an upper bound for what a client sees. Each round runs the three
modes back to back (in rotating order) over pre-signed QUERY_EVENTS commands of a registered
identity; the medians of commands/s per mode are printed and written to bench/results/.

On a shared, overloaded machine throughput swings more than the effect being measured, so the
bench also accounts the cost directly: the time of one `observe()` call on the request thread
(median over 50 000 calls) and the background writer's time per row (metering.flush() of 20 000
rows: COPY batches on PostgreSQL), divided by the time of one command with metering off.
Database: BENCH_METERING_DB (default mediator_bench_metering), dropped and recreated.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
DB = os.environ.get("BENCH_METERING_DB", "mediator_bench_metering")
PG = os.environ.get("BENCH_PG", "postgresql://postgres@127.0.0.1:5432")


def setup_django() -> None:
    for sql in (f"DROP DATABASE IF EXISTS {DB}", f"CREATE DATABASE {DB}"):
        subprocess.run(
            ["psql", f"{PG}/postgres", "-qc", sql], check=True, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL
        )
    os.environ.update(
        {"DJANGO_SETTINGS_MODULE": "mediator_project.settings", "DATABASE_URL": f"{PG}/{DB}", "LOG_LEVEL": "WARNING"}
    )
    sys.path.insert(0, str(ROOT))
    import django

    django.setup()
    from django.core.management import call_command

    call_command("migrate", verbosity=0)


class DirectPoster:
    """The Poster interface of tests/support over dispatch.handle (no HTTP)."""

    def __init__(self, tenant):
        self.tenant = tenant

    def command(self, who, payload, *, recipient_did: str, **kw):
        from apps.decentrl.dispatch import handle
        from apps.wire.canonical import canonical_bytes

        outcome, _ = handle(
            canonical_bytes(who.sign_command(recipient_did=recipient_did, payload=payload, **kw)), self.tenant
        )
        return outcome.status, outcome.body


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--commands", type=int, default=1000)
    parser.add_argument("--rounds", type=int, default=5)
    args = parser.parse_args()
    setup_django()
    from django.conf import settings

    from apps.decentrl import hooks
    from apps.decentrl.dispatch import handle
    from apps.tenants.services import tenant_create
    from apps.usage import metering
    from apps.usage.models import CommandMeter
    from apps.wire.canonical import canonical_bytes
    from apps.wire.client import Identity
    from tests.support.registration import register

    tenant = tenant_create(slug="bench", domain="bench.test")
    type(tenant).objects.filter(pk=tenant.pk).update(rate_limit_per_did=0, rate_limit_per_ip=0)
    tenant.refresh_from_db()
    alice = Identity.create("alice", tenant.did)
    register(DirectPoster(tenant), alice, tenant)

    def batch() -> list[bytes]:
        return [
            canonical_bytes(
                alice.sign_command(recipient_did=tenant.did, payload={"type": "QUERY_EVENTS", "filter": {}})
            )
            for _ in range(args.commands)
        ]

    def run(mode: str) -> float:
        bodies = batch()
        settings.USAGE_METERING_MODE = "buffered" if mode == "off" else mode
        if mode == "off":
            hooks.OBSERVERS.remove(metering.observe)
        try:
            t0 = time.perf_counter()
            for body in bodies:
                outcome, _ = handle(body, tenant)
                assert outcome.status == 200, outcome.body
            elapsed = time.perf_counter() - t0
        finally:
            if mode == "off":
                hooks.OBSERVERS.append(metering.observe)
        metering.flush()
        return args.commands / elapsed

    # Direct cost accounting.
    from datetime import UTC, datetime

    record = hooks.CommandRecord(
        tenant_id=tenant.pk,
        tenant_slug=tenant.slug,
        at=datetime.now(UTC),
        transport="http",
        channel="DIRECT_AUTHENTICATED",
        command_type="QUERY_EVENTS",
        code="SUCCESS",
        http_status=200,
        bytes_in=700,
        bytes_out=120,
        duration_ms=3.2,
        sender_did=alice.did,
        remote_addr="127.0.0.1",
    )
    settings.USAGE_METERING_MODE = "buffered"
    metering.flush()
    samples = []
    for _ in range(50):
        t0 = time.perf_counter()
        for _ in range(1000):
            metering.observe(record)
        samples.append((time.perf_counter() - t0) / 1000 * 1e6)
        if metering.pending() > 20_000:
            metering.flush()
    observe_us = statistics.median(samples)
    metering.flush()
    # The writer's work for 20 000 rows, exactly as the background thread does it (metering.flush:
    # COPY in USAGE_METERING_BATCH-row batches on PostgreSQL). The buffer is filled directly so that
    # only the writer is timed.
    metering._buffer.extend([record] * 20_000)
    t0 = time.perf_counter()
    metering.flush()
    flush_us_per_row = (time.perf_counter() - t0) / 20_000 * 1e6
    print(f"observe() {observe_us:.2f} us/call, writer {flush_us_per_row:.1f} us/row", flush=True)

    modes = ["off", "buffered", "sync"]
    run("buffered")  # warm-up: connections, caches, JIT-free but import-heavy first calls
    rates: dict[str, list[float]] = {m: [] for m in modes}
    before = CommandMeter.objects.count()
    for r in range(args.rounds):
        order = modes[r % 3 :] + modes[: r % 3]
        for mode in order:
            rates[mode].append(round(run(mode), 1))
        print(f"round {r + 1}: " + "  ".join(f"{m} {rates[m][-1]}/s" for m in modes), flush=True)
    metered = CommandMeter.objects.count() - before
    medians = {m: statistics.median(v) if v else None for m, v in rates.items()}
    command_us = 1e6 / medians["off"] if medians["off"] else None
    result = {
        "commands_per_round": args.commands,
        "rounds": args.rounds,
        "rates": rates,
        "median_per_s": medians,
        "overhead_buffered_pct": round(100 * (1 - medians["buffered"] / medians["off"]), 1) if command_us else None,
        "overhead_sync_pct": round(100 * (1 - medians["sync"] / medians["off"]), 1) if command_us else None,
        "observe_us_per_call": round(observe_us, 2),
        "writer_us_per_row": round(flush_us_per_row, 1),
        "command_us_metering_off": round(command_us, 1) if command_us else None,
        "accounted_buffered_cost_pct": round(100 * (observe_us + flush_us_per_row) / command_us, 2)
        if command_us
        else None,
        "rows_metered": metered,
        "rows_expected": 2 * args.commands * args.rounds,  # buffered + sync rounds
        "load_average": os.getloadavg(),
    }
    out = ROOT / "bench" / "results"
    out.mkdir(parents=True, exist_ok=True)
    (out / "metering_overhead.json").write_text(json.dumps(result, indent=2))
    print(json.dumps(result))


if __name__ == "__main__":
    main()
