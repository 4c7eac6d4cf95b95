#!/usr/bin/env bash
# One operation on a host of the running simulated cluster, for the drills (scripts/cluster/drill.py)
# and by hand:
#   node.sh kill HOST            SIGKILL every process of HOST
#   node.sh kill-postgres DB     SIGKILL Patroni and PostgreSQL of DB (its etcd member stays)
#   node.sh start-app APP | start-patroni DB
#   node.sh start-redis HOST     Redis (a replica of the current master) and the sentinel of HOST
#   node.sh redis-master         the Redis master's host, as the sentinels report it
#   node.sh redis-ready          exit 0 when Redis is at full strength (replica in sync, 3 sentinels)
#   node.sh cut APP | heal APP   APP's link to the database hosts down / up again
#   node.sh primary              the Patroni leader's name
set -euo pipefail
source "$(dirname "$0")/common.sh"
case "${1:-}" in
  kill) kill_host "$2" ;;
  kill-postgres) kill_postgres "$2" ;;
  start-app) start_app "$2" ;;
  start-patroni) start_patroni "$2" ;;
  start-redis)
    master="$(redis_master)"
    [ "$2" = "$master" ] && { echo "$2 is the master" >&2; exit 1; }
    [ "$2" = redis3 ] || start_redis "$2" "$master"
    start_sentinel "$2" ;;
  redis-master) redis_master ;;
  redis-ready) redis_ready ;;
  cut) cut_db "$2" ;;
  heal) heal_db "$2" ;;
  primary) primary ;;
  *) sed -n '2,11p' "$0"; exit 2 ;;
esac
