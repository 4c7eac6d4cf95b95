#!/bin/sh
# The image's entrypoint (Containerfile, docs/containers.md): one role per container, chosen by the
# command, each role the same process as the production layout's supervisord program and systemd
# unit (docs/serving.md), in the foreground as PID 1's only child (exec: signals reach it as they
# would under supervisord).
#   http      Granian, the HTTP tier (mediator_project/http_server.py) on HTTP_HOST:HTTP_PORT
#   sockets   Daphne, /ws and /didcomm/ws (mediator_project/socket_server.py) on WS_HOST:WS_PORT
#   worker    the Celery worker: the queue celery, and the push wake-ups' queue PUSH_QUEUE too
#             unless PUSH_WORKER=1 says a push-worker container of its own takes those
#   push-worker  the push wake-ups' worker (docs/push.md, "The worker"): PUSH_QUEUE only, a pool
#             of PUSH_CONCURRENCY threads
#   beat      Celery beat: exactly one per deployment; its schedule file in MEDIATOR_STATE_DIR
#   migrate   the one-shot job: database migrations, then the first operator when
#             DJANGO_SUPERUSER_USERNAME and DJANGO_SUPERUSER_PASSWORD (or _FILE) are set and no
#             such operator exists yet; exits 0 when done
#   engine    the reports' Spark Connect server (spark_reports/engine.py): only in the Spark image
#             (Containerfile.spark), which carries Java and Spark's jars
#   check     loads the settings and exits (refuses debug or missing secrets in production)
# Anything else is run as given (`podman run IMAGE python manage.py …`).
set -eu
cd /opt/mediator
# One stream: the log records (LOG_FORMAT=json, one object per line) and anything a process writes
# to stderr go to the container's stdout.
exec 2>&1
role="${1:-http}"
[ "$#" -gt 0 ] && shift
# Metrics of the role's processes (Granian's workers) are summed at scrape time from this
# directory (docs/operations.md); it must start empty, and lives on the writable /tmp (a tmpfs).
metrics() {
  if [ -n "${PROMETHEUS_MULTIPROC_DIR:-}" ]; then
    rm -rf "$PROMETHEUS_MULTIPROC_DIR" && mkdir -p "$PROMETHEUS_MULTIPROC_DIR"
  fi
}
case "$role" in
  http)
    metrics
    export DB_CONN_MAX_AGE="${HTTP_DB_CONN_MAX_AGE:-600}"
    exec python -m mediator_project.http_server "$@" ;;
  sockets)
    metrics
    exec python -m mediator_project.socket_server -b "${WS_HOST:-0.0.0.0}" -p "${WS_PORT:-8001}" "$@" ;;
  worker)
    metrics
    [ "${PUSH_WORKER:-0}" = 1 ] && queues=celery || queues="celery,${PUSH_QUEUE:-push}"
    exec celery -A mediator_project worker -Q "$queues" --concurrency "${CELERY_CONCURRENCY:-1}" -l "${CELERY_LOG_LEVEL:-warning}" "$@" ;;
  push-worker)
    metrics
    exec celery -A mediator_project worker -Q "${PUSH_QUEUE:-push}" --pool threads --concurrency "${PUSH_CONCURRENCY:-8}" \
      -n "push@%h" -l "${CELERY_LOG_LEVEL:-warning}" "$@" ;;
  beat)
    metrics
    exec celery -A mediator_project beat -l "${CELERY_LOG_LEVEL:-warning}" -s "${MEDIATOR_STATE_DIR:-/var/lib/mediator}/celerybeat-schedule" "$@" ;;
  migrate)
    # The database may still be starting (compose starts it first, Kubernetes at the same time):
    # wait for it up to DB_WAIT_SECONDS (60) rather than fail the job.
    python - <<'PY'
import os, sys, time
import django
from django.db import connection
from django.db.utils import OperationalError

django.setup()
deadline = time.monotonic() + float(os.environ.get("DB_WAIT_SECONDS", "60"))
while True:
    try:
        connection.ensure_connection()
        break
    except OperationalError:
        if time.monotonic() > deadline:
            sys.exit("migrate: the database did not answer within DB_WAIT_SECONDS")
        time.sleep(0.5)
PY
    python manage.py migrate --noinput -v "${MIGRATE_VERBOSITY:-1}"
    if [ -n "${DJANGO_SUPERUSER_USERNAME:-}${DJANGO_SUPERUSER_USERNAME_FILE:-}" ]; then
      python - <<'PY'
import os
import django
from django.core.management import call_command
from mediator_project.env import env

django.setup()
from django.contrib.auth import get_user_model  # noqa: E402

username = env("DJANGO_SUPERUSER_USERNAME")
os.environ["DJANGO_SUPERUSER_PASSWORD"] = env("DJANGO_SUPERUSER_PASSWORD") or ""
if get_user_model().objects.filter(username=username).exists():
    print(f"operator {username!r} already exists")
else:
    call_command("create_operator", username=username, interactive=False)
PY
    fi
    exit 0 ;;
  engine)
    exec python -m spark_reports.engine serve "$@" ;;
  check)
    exec python -c 'import django; django.setup(); print("settings load")' ;;
  *)
    exec "$role" "$@" ;;
esac
