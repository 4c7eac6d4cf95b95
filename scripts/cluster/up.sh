#!/usr/bin/env bash
# `make cluster`: the product as a cluster on one machine (docs/serving.md, "Past one box").
#   lb       HAProxy :80, HTTP and WebSocket, /health checks of app1 and app2, Host passed through
#   app1/2   the production layout minus PostgreSQL (scripts/run_production.sh: nginx, Granian,
#            Daphne, a Celery worker and beat), nginx listening on the host's address
#   db1..3   etcd + Patroni + PostgreSQL, synchronous_mode: a commit is acknowledged only once
#            the synchronous standby has it; the apps reach the primary with libpq multi-host
#            (target_session_attrs=read-write)
#   redis1/2 Redis, the channel layer, Celery's broker and the rate limits: a master and its
#            replica (redis1 the first master), a sentinel on each; redis3 a third sentinel
#            (quorum 2). The apps find the master through the sentinels (REDIS_SENTINELS)
#   client   where the drills' clients run (scripts/cluster/drill.py), outside the cluster
# Each host is a network namespace on one bridge (scripts/cluster/common.sh). Returns once the
# balancer answers /health through both apps. `make cluster-down` undoes everything.
set -euo pipefail
source "$(dirname "$0")/common.sh"
cd "$ROOT"
"$ROOT/scripts/cluster/install.sh"
if ip netns list | grep -q "^$NS-"; then log "already up (make cluster-down first)"; exit 1; fi
mkdir -p "$CLUSTER_DIR"

wait_for() { # description, seconds, command...
  local what=$1 limit=$2; shift 2
  local deadline=$((SECONDS + limit))
  until "$@" >/dev/null 2>&1; do
    [ "$SECONDS" -lt "$deadline" ] || { log "$what did not come up in ${limit}s (logs: $CLUSTER_DIR)"; return 1; }
    sleep 0.5
  done
}

# --- network ---------------------------------------------------------------------------------
log "network $NET.0/24 in namespaces $NS-*"
ip netns add "$NS-sw"
ip -n "$NS-sw" link set lo up
ip -n "$NS-sw" link add br0 type bridge
ip -n "$NS-sw" link set br0 up
for host in "${HOSTS[@]}"; do
  ip netns add "$NS-$host"
  ip link add "v-$host" netns "$NS-sw" type veth peer name eth0 netns "$NS-$host"
  ip -n "$NS-sw" link set "v-$host" master br0 up
  ip -n "$NS-$host" link set lo up
  ip -n "$NS-$host" addr add "${ADDR[$host]}/24" dev eth0
  ip -n "$NS-$host" link set eth0 up
  mkdir -p "$CLUSTER_DIR/$host"
done

# --- etcd and Patroni ------------------------------------------------------------------------
initial=""
for db in "${DBS[@]}"; do initial+="${initial:+,}$db=http://${ADDR[$db]}:2380"; done
etcd_hosts=""
for db in "${DBS[@]}"; do etcd_hosts+="${etcd_hosts:+,}${ADDR[$db]}:2379"; done
for db in "${DBS[@]}"; do
  a=${ADDR[$db]}
  spawn "$db" etcd etcd --name "$db" --data-dir "$CLUSTER_DIR/$db/etcd" --enable-v2=true \
    --listen-client-urls "http://$a:2379" --advertise-client-urls "http://$a:2379" \
    --listen-peer-urls "http://$a:2380" --initial-advertise-peer-urls "http://$a:2380" \
    --initial-cluster "$initial" --initial-cluster-state new --initial-cluster-token "$NS" \
    --heartbeat-interval 200 --election-timeout 2000
done
for db in "${DBS[@]}"; do
  a=${ADDR[$db]}
  mkdir -p "$CLUSTER_DIR/$db/run"
  # Small on purpose: a 2-core machine runs three of these beside two app nodes.
  cat > "$CLUSTER_DIR/$db/patroni.yml" <<YML
scope: $NS
name: $db
restapi:
  listen: $a:8008
  connect_address: $a:8008
etcd:
  hosts: $etcd_hosts
bootstrap:
  dcs:
    # The leader key lives ttl seconds without its holder's renewal: a dead primary is replaced
    # within about ttl + loop_wait.
    ttl: 10
    loop_wait: 2
    retry_timeout: 4
    maximum_lag_on_failover: 1048576
    synchronous_mode: true
    postgresql:
      use_pg_rewind: true
      parameters:
        wal_log_hints: "on"
        max_connections: 80
        shared_buffers: 32MB
        work_mem: 2MB
        maintenance_work_mem: 16MB
        max_wal_senders: 5
        max_replication_slots: 5
        wal_keep_size: 64MB
  initdb:
  - encoding: UTF8
  - locale: C.UTF-8
postgresql:
  listen: $a:5432
  connect_address: $a:5432
  data_dir: $CLUSTER_DIR/$db/pgdata
  bin_dir: $PG_BIN
  pgpass: $CLUSTER_DIR/$db/pgpass
  authentication:
    superuser: {username: postgres, password: cluster}
    replication: {username: replicator, password: cluster}
    rewind: {username: postgres, password: cluster}
  parameters:
    unix_socket_directories: $CLUSTER_DIR/$db/run
  # The cluster's network is private to its namespaces: trust there, nothing else.
  pg_hba:
  - local all all trust
  - host all all $NET.0/24 trust
  - host replication replicator $NET.0/24 trust
tags: {}
YML
  chown -R postgres:postgres "$CLUSTER_DIR/$db"
done
for db in "${DBS[@]}"; do start_patroni "$db"; done

# --- Redis under Sentinel, started while Patroni bootstraps -------------------------
start_redis redis1
wait_for "Redis on redis1" 20 in_ns client redis-cli -h "${ADDR[redis1]}" ping
start_redis redis2 redis1
for s in "${SENTINEL_HOSTS[@]}"; do start_sentinel "$s"; done

# --- the database, once Patroni has a primary and a synchronous standby ---------------------
wait_for "a Patroni primary" 180 primary
synced() { in_ns client curl -fsS -m 2 "http://${ADDR[$(primary)]}:8008/cluster" | grep -q '"sync_standby"'; }
wait_for "a synchronous standby" 180 synced
p="${ADDR[$(primary)]}"
log "primary $(primary)"
in_ns client "$PG_BIN/psql" -qAt -h "$p" -U postgres -d postgres -c "CREATE ROLE mediator LOGIN" -c "CREATE DATABASE mediator OWNER mediator"

wait_for "the Redis replica in sync and three sentinels agreeing" 60 redis_ready
log "Redis master $(redis_master), sentinels on ${SENTINEL_HOSTS[*]}"

# --- the apps --------------------------------------------------------------------------------
if [ ! -f "$CLUSTER_DIR/secrets.env" ]; then
  python3 -c 'import secrets; print(f"DJANGO_SECRET_KEY={secrets.token_urlsafe(48)}\nMEDIATOR_DEPLOYMENT_KEY={secrets.token_hex(32)}")' \
    > "$CLUSTER_DIR/secrets.env"
fi
# Settings every app node shares. Rate limits are out of the drills' way (one client address,
# many senders); the group expiry is short so that sockets re-join their groups within 5 s of a
# Redis that lost them (a failover can lose the last joins; apps/realtime/groups.Memberships
# re-joins every quarter of it).
cat > "$CLUSTER_DIR/app.env" <<ENV
$(cat "$CLUSTER_DIR/secrets.env")
DATABASE_URL=$DATABASE_URL
REDIS_SENTINELS=$REDIS_SENTINELS
REDIS_SENTINEL_MASTER=$REDIS_MASTER_NAME
MEDIATOR_ENV=production
MEDIATOR_PUBLIC_SCHEME=http
MEDIATOR_OPERATOR_HOSTS=ops.cluster.test
MEDIATOR_CHANNEL_GROUP_EXPIRY_S=20
MEDIATOR_RATE_LIMIT_PER_DID=100000
MEDIATOR_DIDCOMM_RATE_LIMIT_PER_SENDER=100000
MEDIATOR_RATE_LIMIT_PER_IP=1000000
MEDIATOR_RATE_LIMIT_PER_IP_BURST=100000
MEDIATOR_DIDCOMM_RATE_LIMIT_PER_IP=1000000
MEDIATOR_DIDCOMM_RATE_LIMIT_PER_IP_BURST=100000
PORT=$APP_PORT
NGINX_LISTEN=0.0.0.0
HTTP_WORKERS=1
HTTP_THREADS=4
DB_POOL_MIN_SIZE=1
DB_POOL_MAX_SIZE=4
CELERY_CONCURRENCY=1
SPARK_MASTER=local[1]
REPORT_READ_FROM=standby
PYTHONPATH=$ROOT
ENV
log "migrating"
in_ns app1 env $(xargs < "$CLUSTER_DIR/app.env") .venv/bin/python manage.py migrate --noinput -v0
in_ns app1 env $(xargs < "$CLUSTER_DIR/app.env") .venv/bin/python manage.py bootstrap_tenant --host "$TENANT_HOST" --port 80
for app in "${APPS[@]}"; do start_app "$app"; done
for app in "${APPS[@]}"; do
  wait_for "$app" 180 in_ns client curl -fsS -m 3 -H "Host: $TENANT_HOST" "http://${ADDR[$app]}:$APP_PORT/health"
done

# --- the balancer ----------------------------------------------------------------------------
env CLUSTER_DIR="$CLUSTER_DIR" $(xargs < "$CLUSTER_DIR/app.env") scripts/cluster/render_lb.sh "${ADDR[lb]}:80" \
  "${ADDR[app1]}:$APP_PORT" "${ADDR[app2]}:$APP_PORT" "$TENANT_HOST" > "$CLUSTER_DIR/lb/haproxy.cfg"
spawn lb haproxy haproxy -W -db -f "$CLUSTER_DIR/lb/haproxy.cfg"
wait_for "the balancer" 30 in_ns client curl -fsS -m 3 -H "Host: $TENANT_HOST" "http://${ADDR[lb]}/health"
log "up: http://${ADDR[lb]}/ (Host: $TENANT_HOST), from the client namespace: ip netns exec $NS-client …"
