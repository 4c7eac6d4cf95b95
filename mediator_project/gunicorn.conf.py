"""gunicorn settings for the production HTTP tier (docs/serving.md): WSGI workers sized to the
cores, each with its own psycopg pool. /ws is served by Daphne beside it.

Default: one `gthread` worker per core with 4 threads each. Measured on 2 cores against sync
workers ×2/×3/×4 (docs/benchmarks.md, issue 8): the least server CPU per TWO_WAY_PRIVATE (fewer
processes to schedule, one realtime push loop and one metering buffer per process) at a similar
p99. `GUNICORN_WORKER_CLASS=sync GUNICORN_WORKERS=…` restores plain sync workers.
"""

import multiprocessing
import os

bind = os.environ.get("GUNICORN_BIND", f"127.0.0.1:{os.environ.get('HTTP_PORT', '8000')}")
worker_class = os.environ.get("GUNICORN_WORKER_CLASS", "gthread")
workers = int(os.environ.get("GUNICORN_WORKERS", multiprocessing.cpu_count()))
threads = int(os.environ.get("GUNICORN_THREADS", "4" if worker_class == "gthread" else "1"))
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
