"""gunicorn settings for the production HTTP tier (docs/serving.md): WSGI workers sized to the
cores, each with its own psycopg pool. /ws is served by Daphne beside it.

Default: one `gthread` worker per core with 8 threads each. Measured on 2 cores against sync
workers ×2/×3/×4 (docs/benchmarks.md, issue 8): the least server CPU per TWO_WAY_PRIVATE (fewer
processes to schedule, one metering buffer per process) at a similar p99. 8 threads rather than
2 or 4: more commands in flight share PostgreSQL's commit flushes (TWO_WAY_PRIVATE at 16
clients: 2 threads 635 req/s, 4 threads 674–806, 8 threads 658–856, 16 threads 842; the box is
noisy, see docs/benchmarks.md). Each thread keeps one database connection (DB_CONN_MAX_AGE, set
by scripts/run_production.sh).

The worker class is gunicorn's `gthread` with one change (mediator_project/gunicorn_worker.py): a
kept-alive connection's next request is served by the thread that served the last one when it
arrives within GUNICORN_KEEPALIVE_LINGER_MS (20 ms), instead of a round trip through the worker's
main thread; ~5% more TWO_WAY_PRIVATE throughput. `GUNICORN_WORKER_CLASS=gthread` restores stock
gunicorn, `GUNICORN_WORKER_CLASS=sync GUNICORN_WORKERS=…` plain sync workers.
"""

import multiprocessing
import os

bind = os.environ.get("GUNICORN_BIND", f"127.0.0.1:{os.environ.get('HTTP_PORT', '8000')}")
LINGERING = "mediator_project.gunicorn_worker.LingeringThreadWorker"
worker_class = os.environ.get("GUNICORN_WORKER_CLASS", LINGERING)
workers = int(os.environ.get("GUNICORN_WORKERS", multiprocessing.cpu_count()))
threads = int(os.environ.get("GUNICORN_THREADS", "8" if worker_class in ("gthread", LINGERING) else "1"))
keepalive = 30
backlog = 2048
timeout = 30
graceful_timeout = 10
accesslog = None  # one structured line per command is logged by the dispatcher instead
errorlog = "-"
loglevel = os.environ.get("GUNICORN_LOGLEVEL", "warning")


def child_exit(server, worker):
    """A worker exited: drop its live-gauge files from the shared metrics directory
    (docs/operations.md, apps.ops.metrics.mark_process_dead); counters of dead workers still count.
    Done with prometheus_client directly so that the master never imports Django."""
    path = os.environ.get("PROMETHEUS_MULTIPROC_DIR")
    if path:
        from prometheus_client import multiprocess

        multiprocess.mark_process_dead(worker.pid, path)
