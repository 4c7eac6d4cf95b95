#!/usr/bin/env bash
# The embedded default: one Daphne process (HTTP + /ws) on SQLite and the in-memory channel layer.
# Background helpers (the Celery worker with beat, once configured) are started here and stopped with it.
set -euo pipefail
BIND="${1:-127.0.0.1}"
PORT="${2:-8000}"
VENV="${VENV:-.venv}"
pids=()
cleanup() {
  for p in "${pids[@]:-}"; do [ -n "$p" ] && kill "$p" 2>/dev/null || true; done
  wait 2>/dev/null || true
}
trap cleanup EXIT INT TERM
if [ -x scripts/run_embedded_extras.sh ]; then
  scripts/run_embedded_extras.sh & pids+=($!)
fi
echo "Serving the default tenant at http://localhost:${PORT} (DID did:web:localhost%3A${PORT})"
# Daphne runs in the background and we wait for it: bash defers traps while a foreground child
# runs, so this is what lets a TERM to this script (or to `make run`) stop Daphne and the helpers.
"$VENV/bin/daphne" -b "$BIND" -p "$PORT" mediator_project.asgi:application & pids+=($!)
wait "$!"
