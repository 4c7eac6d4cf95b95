#!/usr/bin/env bash
# One operation on a host of the running simulated cluster, for the drills (scripts/cluster/drill.py)
# and by hand:
#   node.sh kill HOST            SIGKILL every process of HOST
#   node.sh kill-postgres DB     SIGKILL Patroni and PostgreSQL of DB (its etcd member stays)
#   node.sh start-app APP | start-patroni DB | start-redis
#   node.sh cut APP | heal APP   APP's link to the database hosts down / up again
#   node.sh primary              the Patroni leader's name
set -euo pipefail
source "$(dirname "$0")/common.sh"
case "${1:-}" in
  kill) kill_host "$2" ;;
  kill-postgres) kill_postgres "$2" ;;
  start-app) start_app "$2" ;;
  start-patroni) start_patroni "$2" ;;
  start-redis) start_redis ;;
  cut) cut_db "$2" ;;
  heal) heal_db "$2" ;;
  primary) primary ;;
  *) sed -n '2,9p' "$0"; exit 2 ;;
esac
