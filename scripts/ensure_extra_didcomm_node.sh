#!/usr/bin/env bash
# didcomm-node (npm, the Rust didcomm crate as WASM) for the DIDComm v2 interop tests
# (tests/interop/test_didcomm_node.py): `npm ci` into tests/interop/node from its committed
# package-lock.json. Safe to run repeatedly; quick when the pinned version is already there.
set -euo pipefail
log() { echo "[ensure_extra_didcomm_node] $*"; }
dir="$(cd "$(dirname "$0")/.." && pwd)/tests/interop/node"
want="$(sed -n 's/.*"didcomm-node": "\([^"]*\)".*/\1/p' "$dir/package.json")"
if ! command -v node >/dev/null 2>&1 || ! command -v npm >/dev/null 2>&1; then
  log "installing nodejs and npm from Debian"
  DEBIAN_FRONTEND=noninteractive apt-get -o DPkg::Lock::Timeout=600 update -qq
  DEBIAN_FRONTEND=noninteractive apt-get -o DPkg::Lock::Timeout=600 install -y -qq --no-install-recommends nodejs npm >/dev/null
fi
have="$(sed -n 's/.*"version": "\([^"]*\)".*/\1/p' "$dir/node_modules/didcomm-node/package.json" 2>/dev/null || true)"
if [ "$have" != "$want" ]; then
  log "installing didcomm-node $want"
  (cd "$dir" && npm ci --no-audit --no-fund --ignore-scripts --loglevel=error)
fi
test -f "$dir/node_modules/didcomm-node/index_bg.wasm"
