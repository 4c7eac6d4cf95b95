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
