#!/usr/bin/env bash
# Prometheus and promtool for deploy/monitoring/ and its tests (docs/containers.md): Debian's
# `prometheus` package when promtool is missing. The package's own service is stopped: the tests
# start their own Prometheus on a loopback port. Safe to run repeatedly.
set -euo pipefail
log() { echo "[ensure_extra_prometheus] $*"; }
if ! command -v promtool >/dev/null 2>&1; then
  log "installing prometheus (promtool)"
  DEBIAN_FRONTEND=noninteractive apt-get -o DPkg::Lock::Timeout=600 update -qq
  DEBIAN_FRONTEND=noninteractive apt-get -o DPkg::Lock::Timeout=600 install -y -qq --no-install-recommends prometheus >/dev/null
  (service prometheus stop || systemctl stop prometheus || true) >/dev/null 2>&1
  (service prometheus-node-exporter stop || true) >/dev/null 2>&1
fi
command -v promtool >/dev/null 2>&1
