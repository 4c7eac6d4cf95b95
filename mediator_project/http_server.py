"""The production HTTP tier (docs/serving.md): Granian serving the WSGI application of
mediator_project/wsgi.py (`POST /` on the command entry, everything else on Django's handler);
/ws is served by Daphne beside it.

    python -m mediator_project.http_server          # supervisord's and systemd's command

Granian parses HTTP in Rust (hyper) on its own runtime thread and calls the application in a
pool of Python threads, one database connection each (DB_CONN_MAX_AGE, set by
scripts/run_production.sh and the systemd unit): no HTTP parsing and no poller/thread hand-off
in Python (docs/serving.md, "Granian for HTTP", has the comparison).

Settings (environment):
- HTTP_PORT (8000): the port on HTTP_HOST (127.0.0.1: nginx is the public side; the container
  image sets 0.0.0.0, its network namespace being the boundary, docs/containers.md);
- HTTP_WORKERS (half the cores, at least 1): worker processes, forked from the master after it
  loaded the application; a worker that dies is forked again by the master after 1 s (with
  more than one, the others keep serving), the master itself is restarted by supervisord or
  systemd. Half, because a command spends its CPU in the worker's Python (one GIL per worker)
  and in PostgreSQL and nginx beside it;
- HTTP_THREADS (8): Python threads per worker that run the application (and hold a database
  connection each): enough that commits do not wait for a thread, few enough that commands do
  not contend for the GIL and PostgreSQL's locks (the measurements: docs/serving.md).
"""

from __future__ import annotations

import errno
import os
import socket
import sys
import time
from typing import Any

from granian import Granian
from granian.constants import HTTPModes, Interfaces
from granian.log import LogLevels
from granian.server.common import AbstractServer

APPLICATION = "mediator_project.wsgi:application"
# How long a starting master waits for its port (see wait_for_port).
PORT_WAIT_SECONDS = 30.0
# SIGTERM: the workers stop accepting (new connections are refused), close idle kept-alive
# connections, answer the requests in flight and exit; a worker still busy after this many seconds
# is killed (docs/containers.md). Below compose's and Kubernetes' grace periods.
WORKERS_KILL_TIMEOUT = 10


def host() -> str:
    return os.environ.get("HTTP_HOST") or "127.0.0.1"


def port() -> int:
    return int(os.environ.get("HTTP_PORT", "8000"))


def workers() -> int:
    return int(os.environ.get("HTTP_WORKERS") or max(1, (os.cpu_count() or 1) // 2))


def wait_for_port(host: str, number: int, timeout: float = PORT_WAIT_SECONDS) -> bool:
    """Wait until `host:number` can be bound (True), or `timeout` passes (False).

    A master that was SIGKILLed leaves its workers holding the listening socket until
    scripts/supervisor_reaper.py (or systemd's control group) ends them; Granian exits at once
    when its bind fails, and each retry would load the application again. The new master waits
    here instead."""
    deadline = time.monotonic() + timeout
    while True:
        probe = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        probe.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            probe.bind((host, number))
            return True
        except OSError as exc:
            if exc.errno != errno.EADDRINUSE or time.monotonic() >= deadline:
                return False
        finally:
            probe.close()
        time.sleep(0.2)


def server(application: str = APPLICATION) -> AbstractServer[Any]:
    """The tier's server for `application` (module:attribute; the product's unless a benchmark serves
    its reference beside it); Granian picks its class (processes or threads) when imported."""
    return Granian(
        application,
        address=host(),
        port=port(),
        interface=Interfaces.WSGI,
        workers=workers(),
        blocking_threads=int(os.environ.get("HTTP_THREADS") or "8"),
        # Threads (and their persistent database connections) are kept while the tier is idle up
        # to DB_CONN_MAX_AGE's 10 minutes.
        blocking_threads_idle_timeout=600,
        http=HTTPModes.http1,
        websockets=False,
        backlog=2048,
        log_level=LogLevels.warning,
        respawn_failed_workers=True,
        respawn_interval=1.0,
        workers_kill_timeout=WORKERS_KILL_TIMEOUT,
    )


if __name__ == "__main__":
    # The application is loaded once, here, before the workers fork (Granian forks on Linux and
    # its workers then find the module loaded): a worker that died is serving again as soon as it
    # is forked, instead of after Django's start-up, and the workers share the loaded code's
    # pages. Nothing connects at import: the database, Redis and the push and metering threads
    # are opened on first use in each worker (fork-aware).
    import mediator_project.wsgi  # noqa: F401

    if not wait_for_port(host(), port()):
        print(f"http_server: {host()}:{port()} still in use after {PORT_WAIT_SECONDS:.0f} s", file=sys.stderr)
    server().serve()
