"""Host → tenant resolution cost, with and without the per-process cache (docs/operators.md).

Run: DATABASE_URL=postgresql://postgres@127.0.0.1:5432/mediator_bench_tenants \
     .venv/bin/python -m bench.tenant_lookup [--tenants 200] [--lookups 5000] [--runs 5]

It migrates that database, creates N tenants (each with one alias) if missing, then times
`tenant_for_host` for primary domains, aliases and unknown hosts (N distinct names each, cycled),
and a whole GET / (DID document) through the Django test client, each with
MEDIATOR_TENANT_CACHE_SECONDS=0 (every call queries) and =5 (warmed: every call is a hit).
Prints the median over runs of the mean cost per call.
"""

from __future__ import annotations

import argparse
import os
import statistics
import time


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--tenants", type=int, default=200)
    parser.add_argument("--lookups", type=int, default=5000)
    parser.add_argument("--runs", type=int, default=5)
    args = parser.parse_args()

    os.environ.setdefault("DJANGO_SETTINGS_MODULE", "mediator_project.settings")
    os.environ.setdefault("USAGE_METERING_MODE", "off")
    import django

    django.setup()
    from django.core.management import call_command
    from django.test import Client
    from django.test.utils import override_settings

    from apps.tenants.models import Tenant
    from apps.tenants.selectors import tenant_cache_clear, tenant_for_host
    from apps.tenants.services import tenant_create

    call_command("migrate", verbosity=0)
    for i in range(Tenant.objects.filter(slug__startswith="bench-").count(), args.tenants):
        tenant_create(slug=f"bench-{i}", domain=f"m{i}.bench.test", aliases=[f"alias{i}.bench.test"])
    hosts = {
        "domain": [f"m{i % args.tenants}.bench.test" for i in range(args.lookups)],
        "alias": [f"alias{i % args.tenants}.bench.test" for i in range(args.lookups)],
        "unknown": [f"nobody{i % args.tenants}.bench.test" for i in range(args.lookups)],
    }
    client = Client()

    def per_call_us(fn, items) -> float:
        """Median over runs of the mean cost per call; the cache (if on) is warmed by one pass first."""
        runs = []
        tenant_cache_clear()
        for item in items:
            fn(item)
        for _ in range(args.runs):
            started = time.perf_counter()
            for item in items:
                fn(item)
            runs.append((time.perf_counter() - started) / len(items) * 1e6)
        return statistics.median(runs)

    print(f"tenants={args.tenants} lookups/run={args.lookups} runs={args.runs} (median µs per call)")
    for ttl in (0, 5):
        with override_settings(MEDIATOR_TENANT_CACHE_SECONDS=ttl, MEDIATOR_DEFAULT_TENANT=""):
            for kind, items in hosts.items():
                print(f"  cache={ttl}s tenant_for_host[{kind:7}] {per_call_us(tenant_for_host, items):8.1f} µs")
            docs = hosts["domain"][: max(1, args.lookups // 5)]
            cost = per_call_us(lambda h: client.get("/", HTTP_HOST=h), docs)
            print(f"  cache={ttl}s GET / (DID document)      {cost:8.1f} µs")


if __name__ == "__main__":
    main()
