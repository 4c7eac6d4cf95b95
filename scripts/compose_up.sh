#!/usr/bin/env bash
# Start deploy/compose.yaml with podman-compose in the order its depends_on says (docs/containers.md):
# PostgreSQL and Redis, healthy; the migrate job, exited 0; then HTTP, sockets, the workers and beat.
#   scripts/compose_up.sh [-p project]        # the variables of compose.yaml from the environment
# Why not `podman-compose up -d` alone: podman-compose turns depends_on into podman's --requires,
# which refuses to start a container whose dependency has exited (the one-shot migrate job), and
# podman before 4.6 has no `wait --condition=healthy` (its conditions are skipped with a
# warning). Docker Compose honours the same file with `docker compose -f deploy/compose.yaml up -d`.
# podman runs a HEALTHCHECK from a systemd timer; without systemd this script runs it itself.
# COMPOSE_WAIT_SECONDS (120) bounds each wait.
set -euo pipefail
cd "$(dirname "$0")/.."
project=mediator
[ "${1:-}" = -p ] && project="$2"
COMPOSE=("${PODMAN_COMPOSE:-$(dirname "$(command -v python3)")/podman-compose}" -f deploy/compose.yaml -p "$project")
[ -x "${COMPOSE[0]}" ] || COMPOSE[0]="${VENV:-.venv}/bin/podman-compose"
export CONTAINERS_CONF="${CONTAINERS_CONF:-$PWD/deploy/podman/containers.conf}"
wait_s="${COMPOSE_WAIT_SECONDS:-120}"
log() { echo "[compose_up] $*"; }
up() { "${COMPOSE[@]}" up -d --no-deps "$@" >/dev/null 2> >(grep -v -e systemd -e 'condition check' >&2); }
healthy() {
  local deadline=$((SECONDS + wait_s))
  for svc in "$@"; do
    until podman healthcheck run "${project}_${svc}_1" >/dev/null 2>&1; do
      [ "$SECONDS" -lt "$deadline" ] || { log "$svc not healthy after ${wait_s}s"; podman logs --tail 30 "${project}_${svc}_1"; exit 1; }
      sleep 0.2
    done
  done
}
up postgres redis && healthy postgres redis
up migrate
deadline=$((SECONDS + wait_s))
until [ "$(podman inspect --format '{{.State.Status}}' "${project}_migrate_1")" = exited ]; do
  [ "$SECONDS" -lt "$deadline" ] || { log "migrate still running after ${wait_s}s"; exit 1; }
  sleep 0.3
done
code="$(podman inspect --format '{{.State.ExitCode}}' "${project}_migrate_1")"
[ "$code" = 0 ] || { log "migrate exited $code"; podman logs --tail 30 "${project}_migrate_1"; exit 1; }
up http sockets worker push-worker beat && healthy http sockets
log "up: HTTP on ${HTTP_PORT:-8001}, sockets on ${WS_PORT:-8002}"
