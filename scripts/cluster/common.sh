# Shared names of the simulated cluster (sourced by scripts/cluster/*.sh). Every host is a network
# namespace named mci-<host> with one veth on a bridge that lives in its own namespace (mci-sw):
# nothing is added to the machine's own namespace, so no cluster address is reachable from, or
# routed to, anywhere else. CLUSTER_DIR holds every file the cluster makes (configurations, data,
# logs, pids); scripts/cluster/down.sh removes it with the namespaces.
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)"
CLUSTER_DIR="${CLUSTER_DIR:-$ROOT/var/cluster}"
NS=mci
NET=10.213.36
declare -A ADDR=([lb]=$NET.2 [app1]=$NET.11 [app2]=$NET.12 [db1]=$NET.21 [db2]=$NET.22 [db3]=$NET.23 [redis]=$NET.31 [client]=$NET.100)
HOSTS=(lb app1 app2 db1 db2 db3 redis client)
DBS=(db1 db2 db3)
APPS=(app1 app2)
APP_PORT=8000
PG_BIN="$(ls -d /usr/lib/postgresql/*/bin | sort -V | tail -1)"
# The tenant's host name: clients send it as Host through the balancer.
TENANT_HOST=mediator.cluster.test
DB_HOSTS="${ADDR[db1]},${ADDR[db2]},${ADDR[db3]}"
# libpq multi-host: the first that accepts a read-write session is the primary.
DATABASE_URL="postgresql://mediator@$DB_HOSTS/mediator?target_session_attrs=read-write&connect_timeout=2&tcp_user_timeout=4000&keepalives_idle=5&keepalives_interval=2&keepalives_count=2"
REDIS_URL="redis://${ADDR[redis]}:6379/0"
in_ns() { local host=$1; shift; ip netns exec "$NS-$host" "$@"; }
log() { echo "[cluster] $*"; }

# A daemon inside a host's namespace, detached from the caller, output appended to its log.
spawn() { local host=$1 name=$2; shift 2; setsid ip netns exec "$NS-$host" "$@" >>"$CLUSTER_DIR/$host/$name.log" 2>&1 < /dev/null & }
start_patroni() { spawn "$1" patroni runuser -u postgres -- patroni "$CLUSTER_DIR/$1/patroni.yml"; }
# No persistence: what Redis holds (channel-layer groups and pushes in flight, Celery's queue of
# maintenance tasks, rate-limit counters) is rebuilt or re-sent; messages live in PostgreSQL.
start_redis() {
  spawn redis redis redis-server --bind "${ADDR[redis]}" --port 6379 --protected-mode no --save "" --appendonly no \
    --dir "$CLUSTER_DIR/redis"
}
start_app() {
  mkdir -p "$CLUSTER_DIR/$1/run"
  (cd "$ROOT" && spawn "$1" layout env $(xargs < "$CLUSTER_DIR/app.env") RUN_DIR="$CLUSTER_DIR/$1/run" scripts/run_production.sh)
}
# Every process of a host, SIGKILLed (a machine losing power).
kill_host() { local pids; pids="$(ip netns pids "$NS-$1")"; [ -z "$pids" ] || kill -KILL $pids; }
# The PostgreSQL side of a database host (Patroni and every postgres process), SIGKILLed; its
# etcd member stays.
kill_postgres() {
  local p
  for p in $(ip netns pids "$NS-$1"); do
    [ "$(cat "/proc/$p/comm" 2>/dev/null)" = etcd ] || kill -KILL "$p" 2>/dev/null || true
  done
}
# The app host's routes to the database hosts replaced by unreachable ones (its link to them down),
# and back.
cut_db() { local db; for db in "${DBS[@]}"; do ip -n "$NS-$1" route add unreachable "${ADDR[$db]}/32"; done; }
heal_db() { local db; for db in "${DBS[@]}"; do ip -n "$NS-$1" route del unreachable "${ADDR[$db]}/32" 2>/dev/null || true; done; }
# The Patroni leader's name.
primary() {
  local db
  for db in "${DBS[@]}"; do
    ip netns exec "$NS-client" curl -fsS -o /dev/null -m 2 "http://${ADDR[$db]}:8008/primary" 2>/dev/null && { echo "$db"; return 0; }
  done
  return 1
}
