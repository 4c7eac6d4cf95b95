"""The operator API against its own OpenAPI schema, fuzzed by schemathesis over a real socket.

A real Daphne serves the test database, seeded with tenants, a DIDComm grant, report runs and
audit entries; schemathesis (the CLI, pinned in requirements-dev.txt) reads /api/v1/schema/ as a
superuser would and runs its example, coverage and fuzzing phases with a fixed seed, failing on a
5xx, an answer the schema does not document (status, content type, body), valid input refused or
invalid input accepted (docs/operators.md#operator-api). MEDIATOR_API_FUZZ_EXAMPLES raises the
number of cases per operation for a long run by hand."""

from __future__ import annotations

import datetime as dt
import os
import subprocess
import sys
from pathlib import Path

from apps.didcomm.models import Mediation
from apps.tenants.services import Actor, api_token_issue, tenant_create, tenant_suspend
from apps.usage.models import ReportDaily, ReportRun
from tests.support.servers import ROOT, server_env, start_daphne

SCHEMATHESIS = Path(sys.executable).parent / "schemathesis"
EXAMPLES = int(os.environ.get("MEDIATOR_API_FUZZ_EXAMPLES", "20"))


def _seed(operator) -> None:
    actor = Actor(user=operator, via="cli")
    a = tenant_create(slug="tenant-a", domain="a.mediator.test", name="Tenant A", actor=actor)
    b = tenant_create(slug="tenant-b", domain="b.mediator.test", name="Tenant B", actor=actor)
    tenant_suspend(tenant=b, actor=actor)
    Mediation.objects.create(tenant=a, client_did="did:peer:2.client", client_hash="0" * 64, state="granted")
    day = dt.date(2026, 1, 1)
    run = ReportRun.objects.create(
        date_from=day, date_to=day, status=ReportRun.Status.SUCCEEDED, row_counts={"daily": 1}
    )
    ReportDaily.objects.create(run=run, tenant=a, day=day, commands=3, errors=0, error_rate=0, bytes_in=10)
    ReportRun.objects.create(date_from=day, date_to=day)


def test_the_operator_api_conforms_to_its_schema(transactional_db, tmp_path, django_user_model):
    operator = django_user_model.objects.create_superuser("olivia", "olivia@ops.test", "correct-horse-battery")
    _seed(operator)
    token = api_token_issue(user=operator).key
    var = tmp_path / "var"
    # DEBUG off, as in production: Django's technical pages would answer HTML where the API answers JSON.
    env = {"MEDIATOR_VAR_DIR": str(var), "CELERY_BROKER_URL": "filesystem://localhost/", "DJANGO_DEBUG": "0"}
    server = start_daphne(tmp_path, env=env)
    try:
        proc = subprocess.run(
            [
                str(SCHEMATHESIS),
                "--config-file",
                str(Path(__file__).with_name("api_fuzz.toml")),
                "run",
                f"{server.url}/api/v1/schema/?format=json",
                "--header",
                f"Authorization: Token {token}",
                "--phases",
                "examples,coverage,fuzzing",
                "--max-examples",
                str(EXAMPLES),
                "--seed",
                "42",
                "--generation-deterministic",
                "--workers",
                "1",
                "--continue-on-failure",
                "--no-color",
                "--request-timeout",
                "30",
            ],
            cwd=tmp_path,
            env=server_env() | {"NO_COLOR": "1"},
            capture_output=True,
            text=True,
            timeout=900,
        )
    finally:
        server.stop()
    report = proc.stdout + proc.stderr
    (ROOT / "test-artifacts").mkdir(exist_ok=True)
    (ROOT / "test-artifacts" / "api-fuzz.txt").write_text(report + "\n--- server log ---\n" + server.log())
    assert proc.returncode == 0, report[-20000:]
