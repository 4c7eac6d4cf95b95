#!/usr/bin/env bash
# `make cluster-down`: ends every process of the simulated cluster (those in its namespaces),
# removes the namespaces and CLUSTER_DIR (scripts/cluster/common.sh). Safe to run repeatedly.
set -uo pipefail
source "$(dirname "$0")/common.sh"
for ns in $(ip netns list | awk '{print $1}' | grep "^$NS-"); do
  pids="$(ip netns pids "$ns")"
  [ -n "$pids" ] && kill -TERM $pids 2>/dev/null
done
for _ in $(seq 1 20); do
  left=""
  for ns in $(ip netns list | awk '{print $1}' | grep "^$NS-"); do left+="$(ip netns pids "$ns")"; done
  [ -z "$left" ] && break
  sleep 0.5
done
for ns in $(ip netns list | awk '{print $1}' | grep "^$NS-"); do
  pids="$(ip netns pids "$ns")"
  [ -n "$pids" ] && kill -KILL $pids 2>/dev/null
  ip netns delete "$ns"
done
rm -rf "$CLUSTER_DIR"
echo "[cluster] down"
