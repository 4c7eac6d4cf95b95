# Shared names of the simulated cluster (sourced by scripts/cluster/*.sh). Every host is a network
# namespace named mci-<host> with one veth on a bridge that lives in its own namespace (mci-sw):
# nothing is added to the machine's own namespace, so no cluster address is reachable from, or
# routed to, anywhere else. CLUSTER_DIR holds every file the cluster makes (configurations, data,
# logs, pids); scripts/cluster/down.sh removes it with the namespaces.
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)"
CLUSTER_DIR="${CLUSTER_DIR:-$ROOT/var/cluster}"
NS=mci
NET=10.213.36
declare -A ADDR=([lb]=$NET.2 [app1]=$NET.11 [app2]=$NET.12 [db1]=$NET.21 [db2]=$NET.22 [db3]=$NET.23
  [redis1]=$NET.31 [redis2]=$NET.32 [redis3]=$NET.33 [client]=$NET.100)
HOSTS=(lb app1 app2 db1 db2 db3 redis1 redis2 redis3 client)
DBS=(db1 db2 db3)
# Redis under Sentinel: a master and a replica (redis1 and redis2, either may be the master), a
# sentinel on each of redis1..3 (redis3 holds only its sentinel), quorum 2.
REDIS_HOSTS=(redis1 redis2)
SENTINEL_HOSTS=(redis1 redis2 redis3)
REDIS_MASTER_NAME=mediator
APPS=(app1 app2)
APP_PORT=8000
PG_BIN="$(ls -d /usr/lib/postgresql/*/bin | sort -V | tail -1)"
# The tenant's host name: clients send it as Host through the balancer.
TENANT_HOST=mediator.cluster.test
DB_HOSTS="${ADDR[db1]},${ADDR[db2]},${ADDR[db3]}"
# libpq multi-host: the first that accepts a read-write session is the primary.
DATABASE_URL="postgresql://mediator@$DB_HOSTS/mediator?target_session_attrs=read-write&connect_timeout=2&tcp_user_timeout=4000&keepalives_idle=5&keepalives_interval=2&keepalives_count=2"
REDIS_SENTINELS="${ADDR[redis1]}:26379,${ADDR[redis2]}:26379,${ADDR[redis3]}:26379"
in_ns() { local host=$1; shift; ip netns exec "$NS-$host" "$@"; }
log() { echo "[cluster] $*"; }

# A daemon inside a host's namespace, detached from the caller, output appended to its log.
spawn() { local host=$1 name=$2; shift 2; setsid ip netns exec "$NS-$host" "$@" >>"$CLUSTER_DIR/$host/$name.log" 2>&1 < /dev/null & }
start_patroni() { spawn "$1" patroni runuser -u postgres -- patroni "$CLUSTER_DIR/$1/patroni.yml"; }
# No persistence: what Redis holds (channel-layer groups and pushes in flight, Celery's queue of
# maintenance tasks, rate-limit counters) is rebuilt or re-sent; messages live in PostgreSQL. The
# replica copies it asynchronously: a failover may lose the last writes, never a stored message.
# start_redis HOST [MASTER]: the Redis of HOST, a replica of MASTER's when given.
start_redis() {
  local host=$1 master=${2:-}
  spawn "$host" redis redis-server --bind "${ADDR[$host]}" --port 6379 --protected-mode no --save "" --appendonly no \
    --dir "$CLUSTER_DIR/$host" ${master:+--replicaof "${ADDR[$master]}" 6379}
}
# The sentinel of HOST; its configuration (which sentinels rewrite with what they learn) is made
# once, naming redis1 as the first master. A master is down for a sentinel after 1 s without an
# answer; two sentinels agreeing start the failover.
start_sentinel() {
  local host=$1 conf="$CLUSTER_DIR/$1/sentinel.conf"
  [ -f "$conf" ] || cat > "$conf" <<CONF
port 26379
bind ${ADDR[$host]}
protected-mode no
dir $CLUSTER_DIR/$host
sentinel monitor $REDIS_MASTER_NAME ${ADDR[redis1]} 6379 2
sentinel down-after-milliseconds $REDIS_MASTER_NAME 1000
sentinel failover-timeout $REDIS_MASTER_NAME 10000
sentinel parallel-syncs $REDIS_MASTER_NAME 1
CONF
  spawn "$host" sentinel redis-server "$conf" --sentinel
}
# A sentinel's view of the master: "KEY VALUE" lines of SENTINEL MASTER.
sentinel_says() { in_ns client redis-cli -h "${ADDR[$1]}" -p 26379 --raw SENTINEL MASTER "$REDIS_MASTER_NAME" 2>/dev/null | paste -d' ' - -; }
# The Redis master's host, as the sentinels report it to clients (a master they see up).
redis_master() {
  local s view ip r
  for s in "${SENTINEL_HOSTS[@]}"; do
    view="$(sentinel_says "$s")" || continue
    grep -qx 'flags master' <<<"$view" || continue
    ip="$(awk '$1 == "ip" {print $2}' <<<"$view")"
    for r in "${REDIS_HOSTS[@]}"; do [ "${ADDR[$r]}" = "$ip" ] && { echo "$r"; return 0; }; done
  done
  return 1
}
# Full strength: every sentinel sees the same master up, with one replica and two other sentinels,
# and the replica's link to the master is up.
redis_ready() {
  local s view master replica
  master="$(redis_master)" || return 1
  for s in "${SENTINEL_HOSTS[@]}"; do
    view="$(sentinel_says "$s")" || return 1
    grep -qx "ip ${ADDR[$master]}" <<<"$view" && grep -qx 'flags master' <<<"$view" \
      && grep -qx 'num-slaves 1' <<<"$view" && grep -qx 'num-other-sentinels 2' <<<"$view" || return 1
  done
  for replica in "${REDIS_HOSTS[@]}"; do [ "$replica" = "$master" ] || break; done
  in_ns client redis-cli -h "${ADDR[$replica]}" INFO replication | grep -q '^master_link_status:up'
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
