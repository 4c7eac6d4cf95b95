#!/usr/bin/env bash
# `make cluster-down`: kills every process of the simulated cluster (those in its namespaces),
# removes the namespaces and CLUSTER_DIR (scripts/cluster/common.sh). Safe to run repeatedly.
set -uo pipefail
source "$(dirname "$0")/common.sh"
# SIGKILL at once: everything the processes hold lives in CLUSTER_DIR, removed below, so a clean
# shutdown (checkpoints, supervisord's stop timeouts) would buy nothing.
for _ in $(seq 1 20); do
  left=""
  for ns in $(ip netns list | awk '{print $1}' | grep "^$NS-"); do left+=" $(ip netns pids "$ns")"; done
  [ -z "${left// /}" ] && break
  kill -KILL $left 2>/dev/null
  sleep 0.2
done
for ns in $(ip netns list | awk '{print $1}' | grep "^$NS-"); do ip netns delete "$ns"; done
rm -rf "$CLUSTER_DIR"
echo "[cluster] down"
