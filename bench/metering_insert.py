"""The metering writer's cost per row on PostgreSQL: COPY (apps/usage/metering.CopyWriter) against
the portable ways to insert a batch, alternately in one run.

    .venv/bin/python -m bench.metering_insert [--rounds 30] [--batch 500]

Each round inserts one batch of metering rows with each way, in rotating order: COPY, one
multi-row INSERT (client-side binding, Django's cursor), executemany, and bulk_create (BulkWriter,
SQLite's writer). Prints the median CPU (process time of this process: the writer thread's cost)
and wall time per row, and each way's CPU ratio to COPY. The question it answers: could one
portable INSERT replace the PostgreSQL seam at no cost (no: see docs/architecture.md, "Seams").
Database: BENCH_METERING_DB (default mediator_bench_metering_insert), dropped and recreated.
"""

from __future__ import annotations

import argparse
import os
import statistics
import time

from bench import metering_overhead

metering_overhead.DB = os.environ.get("BENCH_METERING_DB", "mediator_bench_metering_insert")


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--rounds", type=int, default=30)
    ap.add_argument("--batch", type=int, default=500)
    args = ap.parse_args()
    metering_overhead.setup_django()
    from django.db import connection
    from django.utils import timezone

    from apps.tenants.services import tenant_create
    from apps.usage import metering
    from apps.usage.models import CommandMeter

    tenant = tenant_create(slug="bench-meter", domain="bench-meter.test")
    now = timezone.now()
    rows = [
        (tenant.pk, now, "http", "decentrl", "", "TWO_WAY_PRIVATE", "OK", 200, 100, 50, 1.5, f"did:example:{i}")
        for i in range(args.batch)
    ]
    table, cols = CommandMeter._meta.db_table, ", ".join(metering._COLUMNS)
    one_row = "(" + ", ".join(["%s"] * len(metering._COLUMNS)) + ")"
    multi_sql = f"INSERT INTO {table} ({cols}) VALUES " + ", ".join([one_row] * len(rows))
    flat = [v for r in rows for v in r]

    def multi_insert() -> None:
        with connection.cursor() as cur:
            cur.execute(multi_sql, flat)

    def executemany() -> None:
        with connection.cursor() as cur:
            cur.executemany(f"INSERT INTO {table} ({cols}) VALUES {one_row}", rows)

    ways = {
        "COPY (CopyWriter)": lambda: metering.CopyWriter().insert(rows),
        "multi-row INSERT": multi_insert,
        "executemany": executemany,
        "bulk_create (BulkWriter)": lambda: metering.BulkWriter().insert(rows),
    }
    names = list(ways)
    cpu: dict[str, list[float]] = {n: [] for n in names}
    wall: dict[str, list[float]] = {n: [] for n in names}
    for rnd in range(args.rounds):
        for name in names[rnd % len(names) :] + names[: rnd % len(names)]:
            c, w = time.process_time(), time.perf_counter()
            ways[name]()
            cpu[name].append((time.process_time() - c) * 1e6 / len(rows))
            wall[name].append((time.perf_counter() - w) * 1e6 / len(rows))
    base = statistics.median(cpu[names[0]])
    print(f"load average {os.getloadavg()[0]:.1f}; {args.rounds} rounds of {args.batch} rows; medians per row")
    for name in names:
        med = statistics.median(cpu[name])
        print(f"{name:26s} CPU {med:6.1f} us  wall {statistics.median(wall[name]):6.1f} us  CPU x{med / base:.1f}")


if __name__ == "__main__":
    main()
