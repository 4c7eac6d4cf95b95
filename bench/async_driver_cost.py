"""Client-side CPU per prepared statement: psycopg's AsyncConnection (what an async product entry
would use, bench/async_entry_probe.py) against asyncpg (bench/lean_reference.py), one connection
each, sequential, on the same trivial statement; alternating rounds, process CPU per call.

    .venv/bin/python -m bench.async_driver_cost --rounds 5 --calls 3000
"""

from __future__ import annotations

import argparse
import asyncio
import statistics
import time

import asyncpg
import psycopg
from psycopg.conninfo import conninfo_to_dict

from bench.pg import PG_ADMIN_URL

SQL_PG = "SELECT %s::bigint, %s::text, %s::bool, %s::bigint, %s::text"
SQL_APG = "SELECT $1::bigint, $2::text, $3::bool, $4::bigint, $5::text"
PARAMS = [7, "did:decentrl:abc", True, 1_700_000_000_000, "payload" * 20]


async def main(rounds: int, calls: int) -> None:
    pconn = await psycopg.AsyncConnection.connect(PG_ADMIN_URL, autocommit=True)
    info = conninfo_to_dict(PG_ADMIN_URL)
    aconn = await asyncpg.connect(
        host=info.get("host"), port=info.get("port"), user=info.get("user"), database=info.get("dbname")
    )
    stmt = await aconn.prepare(SQL_APG)

    async def run_psycopg():
        for _ in range(calls):
            cur = await pconn.execute(SQL_PG, PARAMS, prepare=True)
            await cur.fetchone()

    async def run_asyncpg():
        for _ in range(calls):
            await stmt.fetchrow(*PARAMS)

    await run_psycopg()
    await run_asyncpg()
    out: dict[str, list[float]] = {"psycopg": [], "asyncpg": []}
    for r in range(rounds):
        for name, fn in (("psycopg", run_psycopg), ("asyncpg", run_asyncpg))[:: 1 if r % 2 == 0 else -1]:
            t0 = time.process_time()
            await fn()
            out[name].append((time.process_time() - t0) / calls * 1e6)
    for name, vals in out.items():
        print(
            f"{name}: median {statistics.median(vals):.1f} µs process CPU per call (rounds {[round(v, 1) for v in vals]})"
        )
    await pconn.close()
    await aconn.close()


if __name__ == "__main__":
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("--rounds", type=int, default=5)
    ap.add_argument("--calls", type=int, default=3000)
    a = ap.parse_args()
    asyncio.run(main(a.rounds, a.calls))
