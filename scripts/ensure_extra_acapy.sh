#!/usr/bin/env bash
# ACA-Py (acapy-agent 1.7.0, PyPI) for the DIDComm v1 end-to-end test (tests/interop/test_acapy_e2e.py):
# its own venv in var/acapy-venv, built from a Python >= 3.13 found on the machine (ACA-Py 1.7 needs it;
# the product runs on 3.11). Looks at $ACAPY_PYTHON, python3.13/python3.14 on PATH, then the pyenv versions.
# Without one it says so loudly and exits 1, so the test fails rather than passes. Idempotent and quick
# when the pinned version is already installed.
set -euo pipefail
log() { echo "[ensure_extra_acapy] $*"; }
root="$(cd "$(dirname "$0")/.." && pwd)"
venv="${ACAPY_VENV:-$root/var/acapy-venv}"
want="1.7.0"

installed() {
  [ -x "$venv/bin/aca-py" ] && compgen -G "$venv/lib/python3.*/site-packages/acapy_agent-$want.dist-info" >/dev/null
}
if installed; then exit 0; fi

new_enough() { "$1" -c 'import sys; sys.exit(0 if sys.version_info >= (3, 13) else 1)' >/dev/null 2>&1; }
python=""
for cand in ${ACAPY_PYTHON:-} python3.14 python3.13 \
  $(ls -d "${PYENV_ROOT:-$HOME/.pyenv}"/versions/3.1[3-9]*/bin/python3 2>/dev/null | sort -rV); do
  if new_enough "$cand"; then python="$(command -v "$cand" || echo "$cand")"; break; fi
done
if [ -z "$python" ]; then
  log "=================================================================================="
  log "NO PYTHON >= 3.13 FOUND: acapy-agent $want cannot be installed, so the ACA-Py"
  log "end-to-end test (tests/interop/test_acapy_e2e.py) WILL FAIL. Install Python 3.13"
  log "(e.g. pyenv install 3.13) or point ACAPY_PYTHON at one, then run this script again."
  log "=================================================================================="
  exit 1
fi

log "installing acapy-agent $want into $venv with $python ($("$python" --version 2>&1))"
rm -rf "$venv"
mkdir -p "$(dirname "$venv")"
"$python" -m venv "$venv"
# (the machine's pip config names local indexes that may be absent: drop those warnings)
"$venv/bin/python" -m pip install -q --disable-pip-version-check "acapy-agent==$want" 2> >(grep -v "is ignored" >&2)
installed || { log "acapy-agent $want did not install into $venv"; exit 1; }
log "acapy-agent $want ready: $venv/bin/aca-py"
