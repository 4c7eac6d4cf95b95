#!/usr/bin/env bash
# The embedded default: one Daphne process (HTTP + /ws) on the embedded PostgreSQL (started around this
# script by scripts/with_postgres.py) and the in-memory channel layer.
# Background helpers (the Celery worker with beat) are started here and stopped with it.
# Ctrl+C (or TERM) stops them all and exits 0, so `make run` ends quietly (no "make: *** Interrupt").
set -euo pipefail
BIND="${1:-127.0.0.1}"
PORT="${2:-8000}"
VENV="${VENV:-.venv}"
pids=()
stop_all() {
  for p in "${pids[@]:-}"; do [ -n "$p" ] && kill "$p" 2>/dev/null || true; done
  wait 2>/dev/null || true
}
on_signal() {
  trap - INT TERM EXIT
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
"$VENV/bin/python" -m mediator_project.socket_server -b "$BIND" -p "$PORT" & pids+=($!)
wait "$!"
