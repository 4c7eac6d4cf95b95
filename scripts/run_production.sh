#!/usr/bin/env bash
# The production serving layout on one box (docs/serving.md), as one command:
#   nginx :PORT  ──/ws──▶ daphne :WS_PORT (Channels consumer, Redis channel layer)
#               └──/────▶ gunicorn :HTTP_PORT (sync WSGI workers, POST / and the rest)
#   celery worker + celery beat on the Redis broker
#   the warm Spark engine (Spark Connect, spark_reports/engine.py) the usage reports run on
# Requires REDIS_URL and DATABASE_URL (PostgreSQL). NO_PROXY=1 skips nginx (clients then use
# HTTP_PORT for HTTP and WS_PORT for /ws). NO_CELERY=1 skips the Celery processes (and the engine).
# SPARK_REMOTE (a cluster's Connect server) or SPARK_MASTER: no local engine is started.
set -euo pipefail
cd "$(dirname "$0")/.."
: "${REDIS_URL:?REDIS_URL must be set for the production layout}"
: "${DATABASE_URL:?DATABASE_URL must be set for the production layout}"
PORT="${PORT:-8000}"
HTTP_PORT="${HTTP_PORT:-$((PORT + 1))}"
WS_PORT="${WS_PORT:-$((PORT + 2))}"
VENV="${VENV:-.venv}"
RUN_DIR="${RUN_DIR:-var/run-$PORT}"
mkdir -p "$RUN_DIR"
RUN_DIR_ABS="$(cd "$RUN_DIR" && pwd)"
export PORT HTTP_PORT WS_PORT PYTHONPATH="${PYTHONPATH:-$PWD}"
# Metrics of every process (gunicorn workers, Daphne) summed at scrape time (docs/operations.md);
# emptied before the processes start.
export PROMETHEUS_MULTIPROC_DIR="${PROMETHEUS_MULTIPROC_DIR:-$RUN_DIR_ABS/metrics}"
rm -rf "$PROMETHEUS_MULTIPROC_DIR" && mkdir -p "$PROMETHEUS_MULTIPROC_DIR"

# nginx (below) reaches gunicorn and Daphne from 127.0.0.1 and sets X-Forwarded-For to the
# client's address: trust it there, so that per-IP limits count clients, not nginx.
if [ "${NO_PROXY:-0}" != 1 ]; then
  export MEDIATOR_TRUSTED_PROXIES="${MEDIATOR_TRUSTED_PROXIES:-127.0.0.1/32}"
fi

pids=()
cleanup() {
  for p in "${pids[@]:-}"; do [ -n "$p" ] && kill "$p" 2>/dev/null || true; done
  wait 2>/dev/null || true
}
trap cleanup EXIT INT TERM

# gunicorn's threads are fixed: one persistent database connection each instead of the pool
# (DB_CONN_MAX_AGE, mediator_project/settings.py); GUNICORN_DB_CONN_MAX_AGE=0 keeps the pool.
DB_CONN_MAX_AGE="${GUNICORN_DB_CONN_MAX_AGE:-600}" \
  "$VENV/bin/gunicorn" -c mediator_project/gunicorn.conf.py mediator_project.wsgi:application & pids+=($!)
"$VENV/bin/daphne" -b 127.0.0.1 -p "$WS_PORT" mediator_project.asgi:application & pids+=($!)
if [ "${NO_CELERY:-0}" != 1 ]; then
  "$VENV/bin/celery" -A mediator_project worker --concurrency "${CELERY_CONCURRENCY:-1}" -l warning & pids+=($!)
  "$VENV/bin/celery" -A mediator_project beat -l warning -s "$RUN_DIR/celerybeat-schedule" & pids+=($!)
  if [ -z "${SPARK_REMOTE:-}" ] && [ -z "${SPARK_MASTER:-}" ]; then
    "$VENV/bin/python" -m spark_reports.engine serve > "$RUN_DIR_ABS/spark-engine.log" 2>&1 & pids+=($!)
  fi
fi
if [ "${NO_PROXY:-0}" != 1 ]; then
  NGINX="${NGINX:-$(command -v nginx || echo /usr/sbin/nginx)}"
  [ -x "$NGINX" ] || { echo "nginx missing: scripts/ensure_extra_nginx.sh (nginx-light), or NO_PROXY=1"; exit 1; }
  sed -e "s/@PORT@/$PORT/g" -e "s/@HTTP_PORT@/$HTTP_PORT/g" -e "s/@WS_PORT@/$WS_PORT/g" -e "s#@RUN_DIR@#$RUN_DIR_ABS#g" \
    deploy/nginx.conf.template > "$RUN_DIR_ABS/nginx.conf"
  "$NGINX" -c "$RUN_DIR_ABS/nginx.conf" -g "daemon off;" & pids+=($!)
fi
echo "production layout: http://localhost:$PORT (gunicorn :$HTTP_PORT, daphne /ws :$WS_PORT)"
wait -n
