"""What a staff member waits for a usage report: from the request to the published run, through the
operator API and in Chromium (the click on *Generate usage report* to the page showing the
published report), with where that time went.

    .venv/bin/python -m bench.usage_click_bench                         # 100k rows, one tenant-day, 3 rounds
    .venv/bin/python -m bench.usage_click_bench --rows 10000000 --rounds 2
    .venv/bin/python -m bench.usage_click_bench --compare /tmp/old-tree # old and new alternately, one run
    .venv/bin/python -m bench.usage_click_bench --cold                  # also the first report on a cold engine

The stack is `make run`'s, each process started as it starts them: Daphne
(`mediator_project.socket_server`), one Celery worker (`--pool solo --concurrency 1`, no beat, so
no 5-minute export lands in a measurement) on the filesystem broker under the tree's var/, and a
Spark engine (`spark_reports.engine`). Each tree (this one, and with --compare another, e.g. a
`git archive` of main) has its own database (BENCH_CLICK_DB-<n>), var/ and lake, seeded with the
same `--rows` metering rows of one tenant on one UTC day; both trees' jobs use one warm engine
(SPARK_REMOTE), so the comparison is of everything around it. The first report of each tree
(not measured) exports the rows to the lake; every measured report's export then finds nothing
new, as in the issue's "almost no metering rows".

Per round and tree, in the order flipping every round: one report through the API (POST, then GET
the run every 50 ms until it has finished: the client's own polling adds at most 50 ms) and one in
Chromium (log in once; open the generate form, fill it, click, wait until `#run-status` says
Published and the charts are in the page). Each report's stages come from the run itself
(`ReportRun.stages`, epoch seconds the launcher records: queued, claimed, engine ready, the job's
steps, its result, published; the old tree has only created/started/finished and the job's own
seconds), and the client's: the request sent, the answer, the page showing the result. Every
stage is printed with its seconds and share of the span.

--cold: after the rounds (the shared engine stopped), each tree's first report on an engine that
is not running, through the API, on a fresh worker and Daphne: the local engine (no SPARK_REMOTE)
of the tree's var/, started by the launcher as under `make run` (JVM start included), then
stopped. Its export finds no new row (the rounds exported them), as after a `make run` restart.
Then, for this tree, the same as `make run` starts it (USAGE_ENGINE_PRESTART: the worker starts and
warms the engine at its start), the report requested as soon as Daphne answers.

Results: var/bench-results/usage_click-<rows>.json (not in git) and stdout.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import statistics
import subprocess
import sys
import time
from datetime import date
from pathlib import Path

import httpx
import psycopg

ROOT = Path(__file__).resolve().parents[1]
PG = os.environ.get("BENCH_PG", "postgresql://postgres@127.0.0.1:5432")
DB = os.environ.get("BENCH_CLICK_DB", "mediator_bench_click")
DAY = date(2026, 1, 1)
ENGINE_PORT = int(os.environ.get("BENCH_CLICK_ENGINE_PORT", "15098"))
BENCH_VAR = Path(os.environ.get("BENCH_VAR_DIR") or ROOT / "var" / "bench-click")
PASSWORD = "bench-click-pass-123"
CHROMIUM = "/usr/bin/chromium"
API_POLL_S = 0.05
FINISHED = ("succeeded", "failed", "cancelled")


def psql(sql: str, db: str = "postgres") -> None:
    subprocess.run(["psql", f"{PG}/{db}", "-v", "ON_ERROR_STOP=1", "-qc", sql], check=True, stdout=subprocess.DEVNULL)


class Side:
    """One tree's database, var/, worker and Daphne."""

    def __init__(self, name: str, tree: Path, n: int, rows: int, remote: str | None) -> None:
        self.name, self.tree, self.rows = name, tree, rows
        self.db = f"{DB}_{n}"
        self.var = BENCH_VAR / name
        self.port = 18650 + n
        self.remote = remote
        self.procs: list[subprocess.Popen] = []
        self.prestart = False
        self.has_stages = "stages = models.JSONField" in (tree / "apps/usage/models.py").read_text()

    def env(self) -> dict:
        env = {k: v for k, v in os.environ.items() if not k.startswith(("REDIS_", "CELERY_", "SPARK_"))}
        env.update(
            DJANGO_SETTINGS_MODULE="mediator_project.settings",
            DATABASE_URL=f"{PG}/{self.db}",
            MEDIATOR_VAR_DIR=str(self.var),
            USAGE_LAKE_URI=str(self.var / "lake"),
            USAGE_METERING_MODE="off",
            PYTHONPATH=str(self.tree),
            PYTHONUNBUFFERED="1",
        )
        if self.remote:
            env["SPARK_REMOTE"] = self.remote
        if self.prestart:
            env["USAGE_ENGINE_PRESTART"] = "1"
        return env

    def django(self, code: str) -> str:
        out = subprocess.run(
            [sys.executable, "-c", "import django; django.setup()\n" + code],
            cwd=self.tree,
            env=self.env(),
            check=True,
            capture_output=True,
            text=True,
        )
        return out.stdout.strip().splitlines()[-1]

    def prepare(self) -> None:
        shutil.rmtree(self.var, ignore_errors=True)
        self.var.mkdir(parents=True)
        psql(f"DROP DATABASE IF EXISTS {self.db}")
        psql(f"CREATE DATABASE {self.db}")
        subprocess.run([sys.executable, "manage.py", "migrate", "-v0"], cwd=self.tree, env=self.env(), check=True)
        self.tenant, self.token = self.django(
            "from django.contrib.auth import get_user_model\n"
            "from apps.tenants.services import tenant_create, api_token_issue\n"
            "t = tenant_create(slug='bench-click', domain='bench-click.test')\n"
            f"u = get_user_model().objects.create_superuser('bench', 'bench@example.test', '{PASSWORD}')\n"
            "print(f'{t.pk} {api_token_issue(user=u).key}')"
        ).split()
        psql(
            f"""INSERT INTO usage_commandmeter (tenant_id, at, transport, protocol, channel, command_type, code,
                  http_status, bytes_in, bytes_out, duration_ms, sender_did)
                SELECT {self.tenant}, TIMESTAMPTZ '{DAY} 00:00:00+00' + (g::float / {self.rows} * 86399) * INTERVAL '1 second',
                       'http', 'decentrl', 'DIRECT_AUTHENTICATED',
                       (ARRAY['QUERY_EVENTS','SAVE_EVENTS','TWO_WAY_PRIVATE','ACKNOWLEDGE_EVENTS'])[1 + g % 4],
                       CASE WHEN g % 17 = 0 THEN 'INVALID_SIGNATURE' ELSE 'SUCCESS' END, 200,
                       200 + g % 4000, 60 + g % 9000, (g * 37 % 20000) / 100.0, 'did:decentrl:user' || (g % 500)
                FROM generate_series(1::bigint, {self.rows}::bigint) g""",
            self.db,
        )
        psql("VACUUM ANALYZE usage_commandmeter", self.db)

    def start(self) -> None:
        log = (self.var / "worker.log").open("ab")
        self.procs.append(
            subprocess.Popen(
                [str(Path(sys.executable).parent / "celery"), "-A", "mediator_project", "worker", "--pool", "solo",
                 "--concurrency", "1", "-n", f"{self.name}@%h", "--loglevel", "warning"],
                cwd=self.tree, env=self.env(), stdout=log, stderr=subprocess.STDOUT,
            )
        )  # fmt: skip
        log = (self.var / "daphne.log").open("ab")
        self.procs.append(
            subprocess.Popen(
                [sys.executable, "-m", "mediator_project.socket_server", "-b", "127.0.0.1", "-p", str(self.port)],
                cwd=self.tree, env=self.env(), stdout=log, stderr=subprocess.STDOUT,
            )
        )  # fmt: skip
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline:
            try:
                if httpx.get(f"{self.url}/health", timeout=1).status_code in (200, 503):
                    return
            except httpx.HTTPError:
                pass
            time.sleep(0.2)
        raise SystemExit(f"{self.name}: Daphne did not answer (see {self.var}/daphne.log)")

    def stop(self) -> None:
        for proc in self.procs:
            proc.terminate()
        for proc in self.procs:
            try:
                proc.wait(20)
            except subprocess.TimeoutExpired:
                proc.kill()
        self.procs = []

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def run_row(self, run_id: int) -> dict:
        columns = "created_at, started_at, finished_at, status, row_counts" + (", stages" if self.has_stages else "")
        with psycopg.connect(f"{PG}/{self.db}") as conn:
            row = conn.execute(f"SELECT {columns} FROM usage_reportrun WHERE id = %s", (run_id,)).fetchone()
        assert row is not None
        out = {
            "created": row[0].timestamp(),
            "started": row[1].timestamp() if row[1] else None,
            "finished": row[2].timestamp() if row[2] else None,
            "status": row[3],
            "job_s": (row[4] or {}).get("job_seconds"),
        }
        if self.has_stages:
            out["stages"] = row[5]
        return out

    def api_report(self, client: httpx.Client) -> dict:
        body = {"date_from": str(DAY), "date_to": str(DAY), "tenants": ["bench-click"]}
        t0 = time.time()
        answer = client.post(f"{self.url}/api/v1/usage/reports/", json=body)
        accepted = time.time()
        assert answer.status_code == 202, answer.text
        run_id = answer.json()["id"]
        while True:
            status = client.get(f"{self.url}/api/v1/usage/reports/{run_id}/").json()["status"]
            if status in FINISHED:
                break
            time.sleep(API_POLL_S)
        done = time.time()
        assert status == "succeeded", f"{self.name}: run {run_id} {status}"
        return spans(self.run_row(run_id), t0, accepted, done, "api")

    def browser_report(self, page) -> dict:
        page.goto(f"{self.url}/admin/usage/reportrun/generate/")
        page.fill("input[name=date_from]", str(DAY))
        page.fill("input[name=date_to]", str(DAY))
        page.check(f"input[name=tenants][value='{self.tenant}']")
        t0 = time.time()
        page.click("#generate-report")
        page.wait_for_url(f"{self.url}/dashboard/reports/*/")
        accepted = time.time()
        run_id = int(page.url.rstrip("/").rsplit("/", 1)[1])
        page.wait_for_selector("#run-status:text-matches('Published|Failed|Cancelled')", timeout=600_000)
        published = time.time()
        page.wait_for_selector("#chart-commands-by-type svg.usage-chart", timeout=60_000)
        done = time.time()
        assert page.inner_text("#run-status") == "Published", f"{self.name}: run {run_id}"
        out = spans(self.run_row(run_id), t0, accepted, done, "browser")
        out["page_says_published_s"] = round(published - t0, 3)
        return out


def spans(run: dict, t0: float, accepted: float, done: float, how: str) -> dict:
    """The report's span from the client's start to what it saw, cut into stages at the run's own
    timestamps: [(stage, seconds)] in order, their sum the span."""
    marks: list[tuple[str, float]] = [("queued", run["created"])]
    if "stages" in run:
        stages = run["stages"]
        for name, at in sorted(stages.items(), key=lambda kv: kv[1]):
            if name != "queued":
                marks.append((name, at))
    else:
        marks.append(("claimed", run["started"]))
        if run["job_s"] is not None:
            # The old launcher: from the claim, its engine check and the job process's start; then
            # the job's own seconds (publishing within them: milliseconds).
            marks.append(("job process", run["finished"] - run["job_s"]))
            marks.append(("published", run["finished"]))
    # Each stage lasts from its own mark to the next one's; the client's request until the run
    # exists, and from the last mark (published) until the client saw it.
    cut = [("request (until the run is queued)", round(marks[0][1] - t0, 3))]
    for (name, at), (_, after) in zip(marks, marks[1:], strict=False):
        cut.append((name, round(after - at, 3)))
    seen = "the page shows it" if how == "browser" else "the client's poll sees it"
    cut.append((f"{marks[-1][0]} → {seen}", round(done - marks[-1][1], 3)))
    total = done - t0
    return {
        "total_s": round(total, 3),
        "accepted_s": round(accepted - t0, 3),
        "stages": cut,
        "job_s": run["job_s"],
    }


def show(label: str, res: dict) -> None:
    print(f"  {label}: {res['total_s']:.2f} s", flush=True)
    for name, seconds in res["stages"]:
        print(f"      {name:<48} {seconds:7.3f} s  {100 * seconds / res['total_s']:5.1f} %", flush=True)


def browser_session(side: Side, pw):
    browser = pw.chromium.launch(executable_path=CHROMIUM, args=["--no-sandbox"], headless=True)
    page = browser.new_page(viewport={"width": 1440, "height": 1000})
    page.goto(f"{side.url}/admin/login/")
    page.fill("input[name=username]", "bench")
    page.fill("input[name=password]", PASSWORD)
    page.click("button[type=submit]")
    page.wait_for_url(f"{side.url}/admin/")
    return browser, page


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--rows", type=int, default=100_000)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--compare", type=Path, help="another tree (a `git archive` of main), alternately")
    parser.add_argument("--cold", action="store_true", help="first each tree's report on a cold local engine")
    parser.add_argument("--no-browser", action="store_true")
    args = parser.parse_args()
    trees = [("new", ROOT)] + ([("old", args.compare.resolve())] if args.compare else [])
    remote = f"sc://127.0.0.1:{ENGINE_PORT}"
    sides = [Side(name, tree, n, args.rows, remote) for n, (name, tree) in enumerate(trees)]
    result: dict = {"rows": args.rows, "rounds": args.rounds, "cpus": os.cpu_count(), "load": [os.getloadavg()[0]]}
    for side in sides:
        side.prepare()
    print(f"seeded {args.rows} rows for {[s.name for s in sides]}", flush=True)
    sys.path.insert(0, str(ROOT))
    from spark_reports import engine

    os.environ["MEDIATOR_VAR_DIR"] = str(BENCH_VAR)
    pid = engine.start_background(var_dir=BENCH_VAR, host="127.0.0.1", port=ENGINE_PORT)
    pw = browsers = None
    try:
        for side in sides:
            side.start()
            with httpx.Client(headers={"Authorization": f"Token {side.token}"}, timeout=600) as client:
                side.api_report(client)  # the first export (every row) and the engine's warm-up
                side.api_report(client)
        if not args.no_browser:
            from playwright.sync_api import sync_playwright

            pw = sync_playwright().start()
            browsers = {side.name: browser_session(side, pw) for side in sides}
        for i in range(args.rounds):
            order = sides if i % 2 == 0 else sides[::-1]
            for side in order:
                with httpx.Client(headers={"Authorization": f"Token {side.token}"}, timeout=600) as client:
                    res = side.api_report(client)
                result.setdefault(f"{side.name}_api", []).append(res)
                show(f"round {i + 1} {side.name} api", res)
                if browsers:
                    res = side.browser_report(browsers[side.name][1])
                    result.setdefault(f"{side.name}_browser", []).append(res)
                    show(
                        f"round {i + 1} {side.name} browser (page says Published at {res['page_says_published_s']} s)",
                        res,
                    )
            result["load"].append(os.getloadavg()[0])
    finally:
        if browsers:
            for browser, _ in browsers.values():
                browser.close()
        if pw:
            pw.stop()
        for side in sides:
            side.stop()
        os.kill(pid, 15)
        deadline = time.monotonic() + 30
        while os.waitpid(pid, os.WNOHANG) == (0, 0) and time.monotonic() < deadline:
            time.sleep(0.2)  # gone before a cold engine starts beside it
    if args.cold:  # after the rounds: the lake holds every row, the export finds none new
        for side in sides:
            side.remote = None  # the local engine of the side's own var/, started by the launcher
            side.start()
            try:
                with httpx.Client(headers={"Authorization": f"Token {side.token}"}, timeout=600) as client:
                    res = side.api_report(client)
            finally:
                side.stop()
                subprocess.run(
                    [sys.executable, "-m", "spark_reports.engine", "stop"], cwd=side.tree, env=side.env(), check=False
                )
            result.setdefault("cold", {})[side.name] = res
            show(f"{side.name} cold engine, api", res)
            if side.name == "new":
                # As `make run` starts it: the worker starts and warms the engine at once
                # (USAGE_ENGINE_PRESTART); the report is requested as soon as Daphne answers.
                side.prestart = True
                side.start()
                try:
                    with httpx.Client(headers={"Authorization": f"Token {side.token}"}, timeout=600) as client:
                        res = side.api_report(client)
                finally:
                    side.stop()
                    subprocess.run(
                        [sys.executable, "-m", "spark_reports.engine", "stop"],
                        cwd=side.tree,
                        env=side.env(),
                        check=False,
                    )
                side.prestart = False
                result.setdefault("make_run", {})[side.name] = res
                show(f"{side.name} as make run starts it (engine prestarted), api", res)
            side.remote = remote
    for key in [k for k in result if k.endswith(("_api", "_browser"))]:
        result[key + "_median_s"] = round(statistics.median(r["total_s"] for r in result[key]), 3)
        job = [r["job_s"] for r in result[key] if r["job_s"] is not None]
        if job:
            result[key + "_job_median_s"] = round(statistics.median(job), 3)
    if args.compare:
        for how in ("api", "browser"):
            if f"new_{how}_median_s" in result:
                result[f"{how}_new_vs_old"] = round(result[f"new_{how}_median_s"] / result[f"old_{how}_median_s"], 2)
    out = ROOT / "var" / "bench-results"
    out.mkdir(parents=True, exist_ok=True)
    (out / f"usage_click-{args.rows}.json").write_text(json.dumps(result, indent=2))
    print(json.dumps({k: v for k, v in result.items() if not isinstance(v, list)}), flush=True)


if __name__ == "__main__":
    main()
