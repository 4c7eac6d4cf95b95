"""The same report on a Spark standalone cluster (a master and two workers from the pyspark wheel's
scripts, the Spark Connect server attached to spark://…, scripts/spark_cluster.py): the export and
the report run unchanged as its client, a worker is killed (with its executor) while the report
computes, Spark reruns the lost tasks on the other worker, and every published figure equals local
mode's. Heavy (four more JVMs): `make spark-cluster-test` runs it (MEDIATOR_SPARK_CLUSTER=1)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from apps.usage import services
from apps.usage.models import MeterExport, ReportRun
from spark_reports.config import database_from_url
from spark_reports.usage_report import run as run_job

from . import dataset

pytestmark = [
    pytest.mark.spark,
    pytest.mark.django_db(transaction=True),
    pytest.mark.skipif(os.environ.get("MEDIATOR_SPARK_CLUSTER") != "1", reason="make spark-cluster-test runs it"),
]
ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT / "scripts"))
import spark_cluster  # noqa: E402 - scripts/ is not a package


def published(run: ReportRun) -> dict:
    out = {}
    for name, model in services.RESULT_MODELS.items():
        fields = [f.name for f in model._meta.fields if f.name not in ("id", "run")]
        out[name] = sorted(tuple(row) for row in model.objects.filter(run=run).values_list(*fields))
    return out


def new_run(tenants) -> ReportRun:
    run = ReportRun.objects.create(date_from=dataset.DAYS[0], date_to=dataset.DAYS[-1], status=ReportRun.Status.RUNNING)
    run.tenants.set(tenants)
    return run


def local_report(spark, tenants) -> ReportRun:
    run = new_run(tenants)
    db = database_from_url(services.report_database_url())
    ids = [t.pk for t in tenants]
    counts = run_job(spark, db, run_id=run.pk, date_from=run.date_from, date_to=run.date_to, tenant_ids=ids)
    return services.report_run_publish(run=run, result=counts, output="")


def cluster_report(tenants, connect: str, worker_pid: int) -> tuple[ReportRun, bool]:
    """The job process as the launcher starts it, a client of the cluster's Connect server
    (SPARK_REMOTE); worker 1 and its executor are SIGKILLed once the report's aggregation has tasks
    (its progress lines say so). Returns the published run and whether the kill happened mid-report."""
    run = new_run(tenants)
    env = services._job_env() | {"SPARK_REMOTE": connect}
    proc = subprocess.Popen(  # noqa: S603
        services._job_command(),
        cwd=ROOT,
        env=env,
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
    )
    # One request, then the end of its input: the job serves the run and exits.
    proc.stdin.write(json.dumps(services._job_request(run)) + "\n")
    proc.stdin.close()
    killed, output = False, []
    for line in proc.stdout:
        output.append(line)
        if not killed and line.startswith(services.PROGRESS_MARKER + " "):
            progress = json.loads(line.split(" ", 1)[1])
            if progress["step"] == "computing the report" and progress["tasks_total"] > progress["tasks_done"]:
                spark_cluster.kill_tree(worker_pid)
                killed = True
    assert proc.wait(60) == 0, "".join(output)
    result = services._parse_result("".join(output))
    return services.report_run_publish(run=run, result=result, output="".join(output)), killed


def test_a_report_on_a_standalone_cluster_equals_local_mode_and_survives_a_killed_worker(
    spark, tenant_a, tenant_b, tmp_path, settings
):
    dataset.write_orm(dataset.build(["a", "b"]), {"a": tenant_a, "b": tenant_b})
    local = local_report(spark, [tenant_a, tenant_b])
    assert local.status == ReportRun.Status.SUCCEEDED

    cluster_dir = tmp_path / "cluster"
    state = spark_cluster.start(cluster_dir, workers=2, worker_memory="1g")
    try:
        # Everything again on the cluster: a new lake and no export yet, so the export runs there too.
        MeterExport.objects.all().delete()
        settings.USAGE_LAKE_URI = str(tmp_path / "cluster-lake")
        apps = spark_cluster.master_state(state["master_ui_port"])["activeapps"]
        assert [a["name"] for a in apps] == ["mediator-spark-engine"]  # the Connect server runs on the cluster
        remote, killed = cluster_report([tenant_a, tenant_b], state["connect"], state["pids"]["worker-1"])
        assert killed  # worker 1 and its executor died while the report's tasks ran
        assert remote.status == ReportRun.Status.SUCCEEDED, remote.log_tail
        assert published(remote) == published(local)
    finally:
        spark_cluster.stop(cluster_dir)
