#!/usr/bin/env bash
# The production serving layout on one box (docs/serving.md), as one command:
#   nginx :PORT  ──/ws──▶ daphne :WS_PORT (Channels consumer, Redis channel layer)
#               └──/────▶ granian :HTTP_PORT (WSGI workers, mediator_project/http_server.py: POST / and the rest)
#   celery worker + the push worker (queue PUSH_QUEUE, PUSH_CONCURRENCY threads) + celery beat on the Redis broker
#   the warm Spark engine of the usage reports (spark_reports/engine.py; not with NO_CELERY, or
#   when SPARK_REMOTE or SPARK_MASTER points the reports elsewhere)
# Every process is a program of supervisord (deploy/supervisord.conf.template), which runs in the
# foreground in place of this script: a process that dies is restarted alone while the others keep
# serving; SIGTERM or SIGINT stops them all. Requires REDIS_URL (or REDIS_SENTINELS with
# REDIS_SENTINEL_MASTER: Redis through Sentinel) and DATABASE_URL (PostgreSQL);
# MEDIATOR_ENV defaults to production, which needs DJANGO_SECRET_KEY and MEDIATOR_DEPLOYMENT_KEY.
# NGINX_LISTEN (127.0.0.1) is nginx's address. NO_PROXY=1 skips nginx (clients then use HTTP_PORT for HTTP and WS_PORT for /ws). NO_CELERY=1
# skips the Celery processes. `scripts/run_production.sh render` writes the configuration to
# RUN_DIR and exits (the systemd units of deploy/systemd/ run it before they start).
set -euo pipefail
cd "$(dirname "$0")/.."
ROOT="$PWD"
[ -n "${REDIS_URL:-}${REDIS_SENTINELS:-}" ] || { echo "REDIS_URL or REDIS_SENTINELS must be set for the production layout" >&2; exit 1; }
: "${DATABASE_URL:?DATABASE_URL must be set for the production layout}"
export MEDIATOR_ENV="${MEDIATOR_ENV:-production}"
PORT="${PORT:-8000}"
HTTP_PORT="${HTTP_PORT:-$((PORT + 1))}"
WS_PORT="${WS_PORT:-$((PORT + 2))}"
VENV="${VENV:-.venv}"
VENV_ABS="$(cd "$VENV" && pwd)"
RUN_DIR="${RUN_DIR:-var/run-$PORT}"
mkdir -p "$RUN_DIR"
RUN_DIR_ABS="$(cd "$RUN_DIR" && pwd)"
export PORT HTTP_PORT WS_PORT PYTHONPATH="${PYTHONPATH:-$PWD}"
# Metrics of every process (Granian workers, Daphne) summed at scrape time (docs/operations.md);
# emptied before the processes start.
export PROMETHEUS_MULTIPROC_DIR="${PROMETHEUS_MULTIPROC_DIR:-$RUN_DIR_ABS/metrics}"

# The settings, loaded once here: production refuses to start in debug or without its secrets
# (mediator_project/settings.py), better said once than by every program on each retry. The body
# cap of nginx is the application's (MEDIATOR_MAX_BODY_BYTES), so that no body is refused by one
# and not the other. MEDIATOR_PUBLIC_SCHEME (https in production) goes to the application as
# nginx's X-Forwarded-Proto, which decides HSTS and Secure cookies (docs/serving.md).
export DJANGO_SETTINGS_MODULE="${DJANGO_SETTINGS_MODULE:-mediator_project.settings}"
# MEDIATOR_CORS_ORIGINS becomes the map nginx uses for the CORS headers of its own error replies,
# the application's rule (apps/decentrl/middleware.py): `*`, or the listed origins echoed back.
settings="$("$VENV_ABS/bin/python" -c 'import django; django.setup(); from django.conf import settings as s
from apps.decentrl.middleware import nginx_cors_maps
print(s.MEDIATOR_MAX_BODY_BYTES, s.MEDIATOR_PUBLIC_SCHEME, nginx_cors_maps(s.MEDIATOR_CORS_ORIGINS))')"
read -r MAX_BODY_BYTES PUBLIC_SCHEME CORS_MAPS <<<"$settings"

# nginx (below) reaches Granian and Daphne from 127.0.0.1 and sets X-Forwarded-For to the
# client's address: trust it there, so that per-IP limits count clients, not nginx.
if [ "${NO_PROXY:-0}" != 1 ]; then
  export MEDIATOR_TRUSTED_PROXIES="${MEDIATOR_TRUSTED_PROXIES:-127.0.0.1/32}"
  NGINX="${NGINX:-$(command -v nginx || echo /usr/sbin/nginx)}"
  [ -x "$NGINX" ] || { echo "nginx missing: scripts/ensure_extra_nginx.sh (nginx-light), or NO_PROXY=1"; exit 1; }
  sed -e "s/@PORT@/$PORT/g" -e "s/@LISTEN@/${NGINX_LISTEN:-127.0.0.1}/g" -e "s/@HTTP_PORT@/$HTTP_PORT/g" -e "s/@WS_PORT@/$WS_PORT/g" -e "s#@RUN_DIR@#$RUN_DIR_ABS#g" \
    -e "s/@USER@/$(id -un)/g" -e "s/@MAX_BODY_BYTES@/$MAX_BODY_BYTES/g" -e "s/@PUBLIC_SCHEME@/$PUBLIC_SCHEME/g" \
    -e "s#@CORS_MAPS@#$CORS_MAPS#g" -e "s/@CLIENT_TIMEOUT@/${NGINX_CLIENT_TIMEOUT:-60s}/g" \
    deploy/nginx.conf.template > "$RUN_DIR_ABS/nginx.conf"
fi
[ "${NO_CELERY:-0}" = 1 ] && celery='/^@CELERY@/d' || celery='s/^@CELERY@//'
[ "${NO_PROXY:-0}" = 1 ] && proxy='/^@PROXY@/d' || proxy='s/^@PROXY@//'
[ "${NO_CELERY:-0}" = 1 ] || [ -n "${SPARK_REMOTE:-}${SPARK_MASTER:-}" ] && engine='/^@ENGINE@/d' || engine='s/^@ENGINE@//'
sed -e "$celery" -e "$proxy" -e "$engine" -e "s#@RUN_DIR@#$RUN_DIR_ABS#g" -e "s#@ROOT@#$ROOT#g" -e "s#@VENV@#$VENV_ABS#g" \
  -e "s#@PYTHON@#$VENV_ABS/bin/python#g" -e "s#@NGINX@#${NGINX:-nginx}#g" -e "s/@WS_PORT@/$WS_PORT/g" \
  -e "s/@CELERY_CONCURRENCY@/${CELERY_CONCURRENCY:-1}/g" \
  -e "s/@PUSH_QUEUE@/${PUSH_QUEUE:-push}/g" -e "s/@PUSH_CONCURRENCY@/${PUSH_CONCURRENCY:-8}/g" \
  -e "s/@HTTP_DB_CONN_MAX_AGE@/${HTTP_DB_CONN_MAX_AGE:-600}/g" \
  deploy/supervisord.conf.template > "$RUN_DIR_ABS/supervisord.conf"
[ "${1:-}" = render ] && exit 0

rm -rf "$PROMETHEUS_MULTIPROC_DIR" && mkdir -p "$PROMETHEUS_MULTIPROC_DIR"
echo "production layout: http://localhost:$PORT (granian :$HTTP_PORT, daphne /ws :$WS_PORT)"
exec "$VENV_ABS/bin/supervisord" -n -c "$RUN_DIR_ABS/supervisord.conf"
