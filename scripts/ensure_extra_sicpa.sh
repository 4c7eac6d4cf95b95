#!/usr/bin/env bash
# SICPA `didcomm` (PyPI) as an independent DIDComm v2 sender for tests/didcomm/test_identus_e2e.py, in its
# own venv var/sicpa-venv: it pins pydid<0.4 and an old pydantic, so never in the product venv.
# Safe to run repeatedly; quick when the pinned version is already there.
set -euo pipefail
log() { echo "[ensure_extra_sicpa] $*"; }
root="$(cd "$(dirname "$0")/.." && pwd)"
venv="$root/var/sicpa-venv"
want="0.3.2"
if ! "$venv/bin/python" -c "import importlib.metadata as m, sys; sys.exit(m.version('didcomm') != '$want')" 2>/dev/null; then
  log "installing didcomm $want into var/sicpa-venv"
  python3 -m venv "$venv"
  "$venv/bin/pip" install -q --disable-pip-version-check "didcomm==$want"
fi
