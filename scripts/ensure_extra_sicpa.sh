#!/usr/bin/env bash
# SICPA `didcomm` and `peerdid` (PyPI, stock) as independent DIDComm v2 peers for tests/interop/test_identus_e2e.py
# (a sender) and tests/interop/test_sicpa_e2e.py (a whole client), in their own venv var/sicpa-venv: they pin
# pydid<0.4 and an old pydantic, so never in the product venv.
# Safe to run repeatedly; quick when the pinned versions are already there.
set -euo pipefail
log() { echo "[ensure_extra_sicpa] $*"; }
root="$(cd "$(dirname "$0")/.." && pwd)"
venv="$root/var/sicpa-venv"
want_didcomm="0.3.2"
want_peerdid="0.5.2"
if ! "$venv/bin/python" -c "import importlib.metadata as m, sys; sys.exit((m.version('didcomm'), m.version('peerdid')) != ('$want_didcomm', '$want_peerdid'))" 2>/dev/null; then
  log "installing didcomm $want_didcomm and peerdid $want_peerdid into var/sicpa-venv"
  python3 -m venv "$venv"
  "$venv/bin/pip" install -q --disable-pip-version-check "didcomm==$want_didcomm" "peerdid==$want_peerdid"
fi
