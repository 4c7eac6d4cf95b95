#!/usr/bin/env bash
# Debian packages of the simulated cluster (scripts/cluster/up.sh, docs/serving.md "Past one box"):
# HAProxy, Patroni, etcd, iproute2, and PostgreSQL and Redis if absent. Run by `make cluster` and
# `make cluster-drill`, not by scripts/ensure_services.sh (the test suite does not need them).
# Safe to run repeatedly; installs only what is missing. The packages' own services are stopped:
# the cluster starts its own processes with its own configurations.
set -euo pipefail
log() { echo "[cluster/install] $*"; }
need=()
command -v haproxy >/dev/null 2>&1 || need+=(haproxy)
command -v patroni >/dev/null 2>&1 || need+=(patroni)
command -v etcd >/dev/null 2>&1 || need+=(etcd-server etcd-client)
command -v ip >/dev/null 2>&1 || need+=(iproute2)
command -v redis-server >/dev/null 2>&1 || need+=(redis-server redis-tools)
ls /usr/lib/postgresql/*/bin/postgres >/dev/null 2>&1 || need+=(postgresql postgresql-client)
if [ "${#need[@]}" -gt 0 ]; then
  log "installing ${need[*]}"
  DEBIAN_FRONTEND=noninteractive apt-get -o DPkg::Lock::Timeout=600 update -qq
  DEBIAN_FRONTEND=noninteractive apt-get -o DPkg::Lock::Timeout=600 install -y -qq --no-install-recommends \
    "${need[@]}" >/dev/null
  # The packaged services (haproxy on :80, etcd on loopback, patroni) are not the cluster's.
  for svc in haproxy etcd patroni; do (service "$svc" stop || true) >/dev/null 2>&1; done
fi
command -v haproxy >/dev/null && command -v patroni >/dev/null && command -v etcd >/dev/null && command -v ip >/dev/null
