"""gunicorn settings for the production HTTP tier (docs/serving.md): sync WSGI workers sized to
the cores, each with its own psycopg pool. /ws is served by Daphne beside it."""

import multiprocessing
import os

bind = os.environ.get("GUNICORN_BIND", f"127.0.0.1:{os.environ.get('HTTP_PORT', '8000')}")
workers = int(os.environ.get("GUNICORN_WORKERS", multiprocessing.cpu_count() * 2))
worker_class = os.environ.get("GUNICORN_WORKER_CLASS", "sync")
threads = int(os.environ.get("GUNICORN_THREADS", "1"))
keepalive = 30
backlog = 2048
timeout = 30
graceful_timeout = 10
accesslog = None  # one structured line per command is logged by the dispatcher instead
errorlog = "-"
loglevel = os.environ.get("GUNICORN_LOGLEVEL", "warning")
