#!/usr/bin/env bash
# Bring up what the test suite needs when it is absent: PostgreSQL (trust on 127.0.0.1:5432),
# Redis (127.0.0.1:6379) and a Redis on the Unix socket var/redis/redis.sock. Debian packages via
# apt; safe to run repeatedly.
set -euo pipefail

log() { echo "[ensure_services] $*"; }
APT_UPDATED=0
apt_install() {
  if [ "$APT_UPDATED" = 0 ]; then DEBIAN_FRONTEND=noninteractive apt-get update -qq; APT_UPDATED=1; fi
  DEBIAN_FRONTEND=noninteractive apt-get install -y -qq "$@" >/dev/null
}

pg_up() { pg_isready -q -h 127.0.0.1 -p 5432 2>/dev/null; }
if ! pg_up; then
  if ! command -v pg_ctlcluster >/dev/null 2>&1; then
    log "installing PostgreSQL"
    apt_install postgresql postgresql-client
  fi
  ver="$(ls /etc/postgresql | sort -V | tail -1)"
  hba="/etc/postgresql/$ver/main/pg_hba.conf"
  if ! grep -q "mediator-tests trust" "$hba"; then
    # Trust local TCP connections: the machine's documented setup, needed by tests and bench.
    sed -i '1i host all all 127.0.0.1/32 trust # mediator-tests trust\nhost all all ::1/128 trust # mediator-tests trust' "$hba"
  fi
  log "starting PostgreSQL $ver"
  pg_ctlcluster --skip-systemctl-redirect "$ver" main start || true
  for _ in $(seq 1 30); do pg_up && break; sleep 1; done
fi
pg_up || { log "PostgreSQL did not come up"; exit 1; }

redis_up() { (command -v redis-cli >/dev/null && redis-cli -h 127.0.0.1 -p 6379 ping 2>/dev/null | grep -q PONG); }
if ! redis_up; then
  command -v redis-server >/dev/null 2>&1 || { log "installing Redis"; apt_install redis-server redis-tools; }
  log "starting Redis"
  mkdir -p /var/lib/redis /var/log/redis
  redis-server --daemonize yes --bind 127.0.0.1 -::1 --port 6379 --save "" --appendonly no \
    --dir /var/lib/redis --logfile /var/log/redis/ci.log
  for _ in $(seq 1 20); do redis_up && break; sleep 0.5; done
fi
redis_up || { log "Redis did not come up"; exit 1; }

# A second Redis, on a Unix socket only, for the tests that run the product over a socket (a
# unix:// REDIS_URL, docs/serving.md); tests/support/servers.py knows the same path.
ROOT="$(cd "$(dirname "$0")/.." && pwd)"
REDIS_SOCKET="$ROOT/var/redis/redis.sock"
if [ "${#REDIS_SOCKET}" -gt 100 ]; then
  log "$REDIS_SOCKET is longer than a Unix socket path may be (100 characters here): use a shorter checkout path"
  exit 1
fi
socket_up() { (command -v redis-cli >/dev/null && redis-cli -s "$REDIS_SOCKET" ping 2>/dev/null | grep -q PONG); }
if ! socket_up; then
  command -v redis-server >/dev/null 2>&1 && command -v redis-cli >/dev/null 2>&1 \
    || { log "installing Redis"; apt_install redis-server redis-tools; }
  log "starting Redis on $REDIS_SOCKET"
  mkdir -p "$ROOT/var/redis"
  redis-server --daemonize yes --port 0 --unixsocket "$REDIS_SOCKET" --unixsocketperm 700 --save "" \
    --appendonly no --dir "$ROOT/var/redis" --logfile "$ROOT/var/redis/redis.log" \
    --pidfile "$ROOT/var/redis/redis.pid"
  for _ in $(seq 1 20); do socket_up && break; sleep 0.5; done
fi
socket_up || { log "Redis on $REDIS_SOCKET did not come up"; exit 1; }

# Optional extra needs (Java, JDBC, Chromium) are added by scripts/ensure_*.sh hooks.
for extra in scripts/ensure_extra_*.sh; do
  [ -x "$extra" ] && "$extra"
done
log "PostgreSQL and Redis are up"
