#!/usr/bin/env bash
# The Identus SDK (npm @hyperledger/identus-sdk, WASM inside) as an independent DIDComm v2 recipient
# for tests/interop/test_identus_e2e.py: `npm ci` into tests/interop/identus from its committed
# package-lock.json (npm registry only; install scripts skipped, none is needed). Safe to run
# repeatedly; quick when the pinned version is already there.
set -euo pipefail
log() { echo "[ensure_extra_identus] $*"; }
dir="$(cd "$(dirname "$0")/.." && pwd)/tests/interop/identus"
want="$(sed -n 's/.*"@hyperledger\/identus-sdk": "\([^"]*\)".*/\1/p' "$dir/package.json")"
if ! command -v node >/dev/null 2>&1 || ! command -v npm >/dev/null 2>&1; then
  log "installing nodejs and npm from Debian"
  DEBIAN_FRONTEND=noninteractive apt-get -o DPkg::Lock::Timeout=600 update -qq
  DEBIAN_FRONTEND=noninteractive apt-get -o DPkg::Lock::Timeout=600 install -y -qq --no-install-recommends nodejs npm >/dev/null
fi
have="$(sed -n 's/^  "version": "\([^"]*\)".*/\1/p' "$dir/node_modules/@hyperledger/identus-sdk/package.json" 2>/dev/null || true)"
if [ "$have" != "$want" ] || [ ! -f "$dir/node_modules/ws/package.json" ]; then
  log "installing @hyperledger/identus-sdk $want"
  (cd "$dir" && npm ci --no-audit --no-fund --ignore-scripts --loglevel=error)
fi
test -f "$dir/node_modules/@hyperledger/identus-sdk/build/index.mjs"
