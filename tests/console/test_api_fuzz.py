"""The operator API against its own OpenAPI schema, fuzzed by schemathesis over a real socket
(docs/operators.md#the-schema-is-tested).

A real Daphne (DEBUG off, as in production) serves the test database, seeded with tenants (one
suspended), a DIDComm grant, a published and a queued report run, and tenant A's push provider,
policy and device; schemathesis (its CLI, pinned in requirements-dev.txt) reads /api/v1/schema/ with a superuser's token and runs its coverage phase
(boundary and type-mutated values of every parameter and member, valid and invalid) and its fuzzing
phase, in deterministic mode: the same cases on every run. The checks (api_fuzz.toml): no 5xx; each
status, content type and body as documented; valid input accepted, invalid input refused.

MEDIATOR_API_FUZZ_EXAMPLES (default FUZZ_EXAMPLES) sets the fuzzing phase's cases per operation;
a long run by hand: MEDIATOR_API_FUZZ_EXAMPLES=200, with MEDIATOR_API_FUZZ_SEED=<n> for other
cases than the deterministic ones. The report is test-artifacts/api-fuzz.txt."""

from __future__ import annotations

import datetime as dt
import os
import subprocess
import sys
from pathlib import Path

from apps.didcomm.models import Mediation
from apps.push import services as push
from apps.push.models import PushProvider
from apps.tenants.services import Actor, api_token_issue, tenant_create, tenant_suspend
from apps.usage.models import ReportDaily, ReportRun
from tests.support.servers import ROOT, server_env, start_daphne

SCHEMATHESIS = Path(sys.executable).parent / "schemathesis"
CONFIG = Path(__file__).with_name("api_fuzz.toml")
FUZZ_EXAMPLES = 5
EXAMPLES = int(os.environ.get("MEDIATOR_API_FUZZ_EXAMPLES", str(FUZZ_EXAMPLES)))
# A long run by hand may draw other cases: MEDIATOR_API_FUZZ_SEED=<n> (the suite's run is deterministic).
SEED = os.environ.get("MEDIATOR_API_FUZZ_SEED")


def _seed(operator) -> ReportRun:
    """What the fuzzed operations find; returns the published run (its CSV is served)."""
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
    # Tenant A's push section (the push operations are fuzzed on tenant A: api_fuzz.toml).
    push.provider_save(
        provider=PushProvider(tenant=a, kind="webhook"),
        actor=actor,
        enabled=True,
        settings_={"url": "https://gateway.example/wake"},
        credentials={"secret": "operator-secret-" * 3},
    )
    push.policy_update(tenant=a, actor=actor, wake_interval_s=300)
    push.device_set(tenant=a, subject="did:example:phone", service="fcm", token="fcm-token-1", platform=None)
    return run


def _config(tmp_path: Path, published: ReportRun) -> Path:
    """api_fuzz.toml, and the published run's id for the CSV download (a random id finds no run)."""
    path = tmp_path / "api_fuzz.toml"
    path.write_text(
        CONFIG.read_text()
        + f'\n[[operations]]\ninclude-operation-id = "usage_reports_csv_retrieve"\nparameters = {{ id = {published.pk} }}\n'
    )
    return path


def test_the_operator_api_conforms_to_its_schema(transactional_db, tmp_path, django_user_model):
    operator = django_user_model.objects.create_superuser("olivia", "olivia@ops.test", "correct-horse-battery")
    published = _seed(operator)
    token = api_token_issue(user=operator).key
    # DEBUG off, as in production: Django's technical pages would answer HTML where the API answers
    # JSON. A var/ and a Celery broker of its own: requested report runs queue there, unread.
    env = {
        "MEDIATOR_VAR_DIR": str(tmp_path / "var"),
        "CELERY_BROKER_URL": "filesystem://localhost/",
        "DJANGO_DEBUG": "0",
    }
    server = start_daphne(tmp_path, env=env)
    try:
        proc = subprocess.run(
            [
                str(SCHEMATHESIS),
                "--config-file",
                str(_config(tmp_path, published)),
                "run",
                f"{server.url}/api/v1/schema/?format=json",
                "--header",
                f"Authorization: Token {token}",
                "--phases",
                "coverage,fuzzing",
                "--max-examples",
                str(EXAMPLES),
                *(["--seed", SEED] if SEED else ["--generation-deterministic"]),
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
            timeout=1800,
        )
    finally:
        server.stop()
    report = proc.stdout + proc.stderr
    (ROOT / "test-artifacts").mkdir(exist_ok=True)
    (ROOT / "test-artifacts" / "api-fuzz.txt").write_text(report + "\n--- server log ---\n" + server.log())
    assert proc.returncode == 0, report[-20000:]
    assert " passed" in report and "Test cases:" in report, report[-5000:]
