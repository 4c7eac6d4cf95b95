#!/usr/bin/env bash
# Started by scripts/run_embedded.sh beside Daphne: one Celery worker with embedded beat, so the
# embedded default runs its maintenance schedule (mediator_project/celery.py) with no server.
# Broker: the filesystem broker under var/ unless CELERY_BROKER_URL/REDIS_URL say otherwise.
# MEDIATOR_EMBEDDED_CELERY=0 skips it. Production runs `celery worker` and `celery beat` as
# separate processes instead (docs/operations.md).
set -euo pipefail
cd "$(dirname "$0")/.."
VENV="${VENV:-.venv}"
if [ "${MEDIATOR_EMBEDDED_CELERY:-1}" = 0 ]; then
  exit 0
fi
VAR_DIR="${MEDIATOR_VAR_DIR:-var}"
mkdir -p "$VAR_DIR"
# The worker starts and warms this deployment's Spark engine at once, in the background
# (USAGE_ENGINE_PRESTART=0: on the first report or export instead), so the first report finds it ready.
export USAGE_ENGINE_PRESTART="${USAGE_ENGINE_PRESTART:-1}"
# exec: run_embedded.sh stops this pid, which is then the worker itself.
# It takes the push wake-ups' queue too (PUSH_QUEUE, docs/push.md).
exec "$VENV/bin/celery" -A mediator_project worker -B -Q "celery,${PUSH_QUEUE:-push}" --concurrency 1 --pool solo \
  --loglevel "${CELERY_LOG_LEVEL:-info}" -s "$VAR_DIR/celerybeat-schedule" -n "embedded@%h"
