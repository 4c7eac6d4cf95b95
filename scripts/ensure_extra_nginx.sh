#!/usr/bin/env bash
# nginx for the production serving layout (scripts/run_production.sh, docs/serving.md) and its
# end-to-end test (tests/e2e/test_production_layout.py): Debian's nginx-light when `nginx` is
# missing. Safe to run repeatedly; installs only what is absent. The package's own service is
# not used (run_production.sh starts nginx with its own config, in the foreground).
set -euo pipefail
log() { echo "[ensure_extra_nginx] $*"; }
if ! command -v nginx >/dev/null 2>&1 && [ ! -x /usr/sbin/nginx ]; then
  log "installing nginx-light"
  DEBIAN_FRONTEND=noninteractive apt-get -o DPkg::Lock::Timeout=600 update -qq
  DEBIAN_FRONTEND=noninteractive apt-get -o DPkg::Lock::Timeout=600 install -y -qq --no-install-recommends nginx-light >/dev/null
  # Debian starts the packaged service on :80; the layout does not need it.
  (service nginx stop || true) >/dev/null 2>&1
fi
command -v nginx >/dev/null 2>&1 || test -x /usr/sbin/nginx
