"""A libpq multi-host DATABASE_URL (the cluster's: docs/serving.md, "Past one box"): its options
(target_session_attrs, connect_timeout) reach psycopg beside the pool's, and a connection goes to
the first host that accepts it. Settings are loaded in a fresh process, as a server loads them."""

from __future__ import annotations

import json
import os
import subprocess
import sys

from tests.support.servers import ROOT

PROBE = """
import json, django
django.setup()
from django.conf import settings
from django.db import connection
with connection.cursor() as cur:
    cur.execute("SELECT host(inet_server_addr()), current_setting('transaction_read_only')")
    addr, read_only = cur.fetchone()
print(json.dumps({"options": settings.DATABASES["default"]["OPTIONS"], "host": settings.DATABASES["default"]["HOST"],
                  "addr": addr, "read_only": read_only}))
"""


def _probe(database_url: str) -> dict:
    env = {k: v for k, v in os.environ.items() if not k.startswith(("DB_", "DJANGO_", "MEDIATOR_ENV"))}
    env.update(
        DJANGO_SETTINGS_MODULE="mediator_project.settings",
        PYTHONPATH=str(ROOT),
        DATABASE_URL=database_url,
        DB_CONN_MAX_AGE="0",
    )
    out = subprocess.run([sys.executable, "-c", PROBE], cwd=ROOT, env=env, capture_output=True, text=True, timeout=60)
    assert out.returncode == 0, out.stderr
    return json.loads(out.stdout.strip().splitlines()[-1])


def test_a_url_without_options_gets_the_pool_alone():
    seen = _probe("postgresql://postgres@127.0.0.1:5432/postgres")
    assert list(seen["options"]) == ["pool"]
    assert seen["addr"] == "127.0.0.1"


def test_a_multi_host_url_keeps_its_options_beside_the_pool_and_connects_to_a_host_that_answers():
    # 127.0.0.2 has no PostgreSQL (the test server listens on 127.0.0.1): libpq moves on to the next.
    seen = _probe(
        "postgresql://postgres@127.0.0.2,127.0.0.1:5432/postgres?target_session_attrs=read-write&connect_timeout=2"
    )
    assert seen["host"] == "127.0.0.2,127.0.0.1"
    assert seen["options"]["target_session_attrs"] == "read-write"
    assert seen["options"]["connect_timeout"] == 2
    assert seen["options"]["pool"]["max_size"] == 16
    assert (seen["addr"], seen["read_only"]) == ("127.0.0.1", "off")
