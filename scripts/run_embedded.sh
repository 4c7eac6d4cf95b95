#!/usr/bin/env bash
# The embedded default: one Daphne process (HTTP + /ws) on the embedded PostgreSQL (started around this
# script by scripts/with_postgres.py) and the in-memory channel layer.
# Background helpers (the Celery worker with beat) are started here and stopped with it, and so is
# this deployment's Spark engine, which the worker starts on the first report or export in its
# own session (spark_reports/engine.py; on a port of its own, recorded in var/spark-engine.json).
# Ctrl+C (or TERM, to this script or its process group) stops them all and exits 0, so `make run`
# ends quietly (no "make: *** Interrupt"): TERM to every process started here and to what they
# started (a report job), KILL to any still alive after MEDIATOR_STOP_GRACE_S (default 20) seconds,
# and `engine stop` for the engine. Further Ctrl+Cs do not cut that short.
# The engine runs in a session of its own, out of reach of a signal to this group: `engine stop` ends
# every engine of this deployment (recorded or not, started or still starting) and waits until none
# is left. This run names itself in MEDIATOR_RUN_ID, so that once its `engine stop` has run, a start
# by its worker (still finishing a task) is refused instead of leaving an engine behind.
set -euo pipefail
BIND="${1:-127.0.0.1}"
PORT="${2:-8000}"
VENV="${VENV:-.venv}"
STOP_GRACE_S="${MEDIATOR_STOP_GRACE_S:-20}"
pids=()
MEDIATOR_RUN_ID="$(cat /proc/sys/kernel/random/uuid)"
export MEDIATOR_RUN_ID
descendants() {
  local child
  for child in $(ps -o pid= --ppid "$1" 2>/dev/null); do
    echo "$child"
    descendants "$child"
  done
}
running() {  # alive and not a zombie
  local state
  state=$(ps -o stat= -p "$1" 2>/dev/null) && [ "${state:0:1}" != Z ]
}
stop_all() {
  trap '' INT TERM
  local procs=() p left deadline engine_stop
  "$VENV/bin/python" -m spark_reports.engine stop >/dev/null 2>&1 & engine_stop=$!
  for p in "${pids[@]:-}"; do
    [ -n "$p" ] || continue
    procs+=("$p")
    mapfile -t -O "${#procs[@]}" procs < <(descendants "$p")
  done
  for p in "${procs[@]:-}"; do [ -n "$p" ] && kill -TERM "$p" 2>/dev/null || true; done
  deadline=$((SECONDS + STOP_GRACE_S))
  while :; do
    left=0
    for p in "${procs[@]:-}"; do [ -n "$p" ] && running "$p" && left=1; done
    [ "$left" = 0 ] || [ "$SECONDS" -ge "$deadline" ] && break
    sleep 0.2
  done
  for p in "${procs[@]:-}"; do [ -n "$p" ] && running "$p" && kill -KILL "$p" 2>/dev/null || true; done
  wait 2>/dev/null || true
}
on_signal() {
  trap - EXIT
  echo "Stopping…"
  stop_all
  echo "Stopped."
  exit 0
}
trap on_signal INT TERM
trap stop_all EXIT
# Refuse a busy port before starting anything or saying "Serving".
"$VENV/bin/python" scripts/port_free.py "$BIND" "$PORT"
"$VENV/bin/python" manage.py migrate --noinput -v0
"$VENV/bin/python" manage.py bootstrap_tenant --port "$PORT"
if [ -x scripts/run_embedded_extras.sh ]; then
  scripts/run_embedded_extras.sh & pids+=($!)
fi
echo "Serving the default tenant at http://localhost:${PORT} (DID did:web:localhost%3A${PORT}); console at http://localhost:${PORT}/admin/ (make operator creates the first operator). Ctrl+C stops."
# Daphne runs in the background and we wait for it: bash defers traps while a foreground child
# runs, so this is what lets a TERM to this script (or to `make run`) stop Daphne and the helpers.
# Its HTTP requests run on a fixed pool of threads (mediator_project/asgi.py), each keeping one
# database connection between requests, as the production HTTP tier's threads do.
DB_CONN_MAX_AGE="${DB_CONN_MAX_AGE:-600}" "$VENV/bin/python" -m mediator_project.socket_server -b "$BIND" -p "$PORT" & pids+=($!)
wait "$!"
