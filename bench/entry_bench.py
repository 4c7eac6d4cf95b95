"""What the command entry buys: CPU per `POST /` through `CommandEntry` (mediator_project.wsgi, the
one entry of both layouts) against Django's own WSGIHandler, whose whole middleware chain serves the
same request through a plain view over the same reply (bench/django_reference.py), in one process, the two taking turns round by round.

    .venv/bin/python -m bench.entry_bench                      # 6 rounds of 3,000 requests each
    .venv/bin/python -m bench.entry_bench --rounds 2 --requests 1000

A fresh database (BENCH_DB, default `mediator_bench_entry`), migrated, with the default tenant. The
request is a JSON object that is not a command: both paths resolve the tenant, cap the body, run the
dispatch's limits and parse, and answer INVALID_COMMAND 400 with the same bytes, so what differs is the
entry alone (no database write, no signature check). Reported: µs of process CPU per request for each,
per round, and the median of the per-round ratios.

JSON + Markdown under bench/results/entry-<UTC time>.*
"""

from __future__ import annotations

import argparse
import io
import os
import statistics
import sys
import time
from datetime import UTC, datetime

import psycopg

from bench import write_results
from bench.pg import PG_ADMIN_URL, db_url

BODY = b'{"type":"NOT_A_COMMAND"}'
ENTRY, DJANGO = "command entry", "Django's handler"


def _fresh_database(name: str) -> str:
    with psycopg.connect(PG_ADMIN_URL, autocommit=True) as admin:
        admin.execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')
        admin.execute(f'CREATE DATABASE "{name}"')
    return db_url(name)


def _environ(host: str) -> dict:
    return {
        "REQUEST_METHOD": "POST",
        "PATH_INFO": "/",
        "SCRIPT_NAME": "",
        "QUERY_STRING": "",
        "SERVER_NAME": host,
        "SERVER_PORT": "8000",
        "SERVER_PROTOCOL": "HTTP/1.1",
        "HTTP_HOST": f"{host}:8000",
        "REMOTE_ADDR": "127.0.0.1",
        "CONTENT_TYPE": "application/json",
        "CONTENT_LENGTH": str(len(BODY)),
        "wsgi.url_scheme": "http",
        "wsgi.errors": sys.stderr,
        "wsgi.multithread": True,
        "wsgi.multiprocess": True,
        "wsgi.run_once": False,
    }


def _round(app, host: str, n: int) -> tuple[float, bytes]:
    """µs of process CPU per request over `n` requests, and the last reply's body."""
    seen: list = []

    def start_response(status, headers, exc_info=None):
        seen[:] = [status]

    body = b""
    started = time.process_time()
    for _ in range(n):
        environ = _environ(host)
        environ["wsgi.input"] = io.BytesIO(BODY)
        result = app(environ, start_response)
        try:
            body = b"".join(result)
        finally:
            close = getattr(result, "close", None)
            if close is not None:
                close()
    elapsed = time.process_time() - started
    if not seen or not seen[0].startswith("400"):
        raise SystemExit(f"unexpected answer {seen} {body[:200]!r}")
    return elapsed / n * 1e6, body


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--rounds", type=int, default=6)
    parser.add_argument("--requests", type=int, default=3000)
    args = parser.parse_args(argv)

    os.environ["DATABASE_URL"] = _fresh_database(os.environ.get("BENCH_DB", "mediator_bench_entry"))
    os.environ["DJANGO_SETTINGS_MODULE"] = "mediator_project.settings"
    os.environ.update({"MEDIATOR_RATE_LIMIT_PER_IP": "0", "MEDIATOR_RATE_LIMIT_PER_DID": "0", "LOG_LEVEL": "WARNING"})
    os.environ.setdefault("USAGE_METERING_MODE", "off")
    from django.core.management import call_command
    from django.core.wsgi import get_wsgi_application

    from mediator_project.wsgi import application as entry

    call_command("migrate", verbosity=0, interactive=False)
    call_command("bootstrap_tenant", port=8000, verbosity=0)
    from django.conf import settings

    settings.ROOT_URLCONF = "bench.django_reference"
    django_chain = get_wsgi_application()
    host = "localhost"
    contenders = {ENTRY: entry, DJANGO: django_chain}
    for app in contenders.values():  # warm-up, and both answer alike
        _round(app, host, 200)
    if _round(entry, host, 1)[1] != _round(django_chain, host, 1)[1]:
        raise SystemExit("the two paths answer differently")

    rows = []
    for i in range(args.rounds):
        order = list(contenders) if i % 2 == 0 else list(reversed(contenders))
        per = {name: _round(contenders[name], host, args.requests)[0] for name in order}
        rows.append(per)
        print(f"round {i + 1}: " + ", ".join(f"{k} {v:.1f} µs" for k, v in per.items()), flush=True)
    ratios = [r[DJANGO] / r[ENTRY] for r in rows]
    summary = {
        "when": datetime.now(UTC).isoformat(timespec="seconds"),
        "requests_per_round": args.requests,
        "rounds": rows,
        "django_over_entry": ratios,
        "median_ratio": statistics.median(ratios),
        "load_average": os.getloadavg(),
    }
    lines = [
        "| round | command entry µs/req | Django's handler µs/req | ratio |",
        "|---|---|---|---|",
        *(
            f"| {i + 1} | {r[ENTRY]:.1f} | {r[DJANGO]:.1f} | {q:.2f} |"
            for i, (r, q) in enumerate(zip(rows, ratios, strict=True))
        ),
        f"\nDjango's handler / command entry, median of the rounds: **{summary['median_ratio']:.2f}×**",
    ]
    write_results("entry", summary, lines)


if __name__ == "__main__":
    main()
