#!/usr/bin/env bash
# Credo (npm @credo-ts/core, didcomm and askar 0.6.3) for the DIDComm v1 end-to-end test
# (tests/interop/test_credo_e2e.py): `npm ci` into tests/interop/credo from its committed lock; and a
# second Credo, 0.5.19 with @credo-ts/push-notifications 0.7.1 (which needs core 0.5.x), for the push
# registration test (tests/interop/test_credo_push_e2e.py): the same into tests/interop/credo05.
# The askar binding's install script downloads its native library from GitHub, which is not reachable
# here, so install scripts are skipped, the two ffi modules are rebuilt with
# `npm rebuild`, and the native library comes from the PyPI wheel aries-askar==0.4.6 (the same
# libaries_askar.so), downloaded with pip into var/cache and unpacked there; the test points
# LIB_ASKAR_PATH at that directory. Nothing is installed into the product venv. Safe to run
# repeatedly; quick when everything is already there.
set -euo pipefail
log() { echo "[ensure_extra_credo] $*"; }
root="$(cd "$(dirname "$0")/.." && pwd)"
askar_version="0.4.6"
askar_dir="$root/var/cache/aries-askar-$askar_version"

if ! command -v node >/dev/null 2>&1 || ! command -v npm >/dev/null 2>&1; then
  log "installing nodejs and npm from Debian"
  DEBIAN_FRONTEND=noninteractive apt-get -o DPkg::Lock::Timeout=600 update -qq
  DEBIAN_FRONTEND=noninteractive apt-get -o DPkg::Lock::Timeout=600 install -y -qq --no-install-recommends nodejs npm >/dev/null
fi

# install <dir> <package>...: `npm ci` from the dir's lock unless those packages are at their pinned
# versions and the ffi modules are built.
install() {
  local dir="$1"
  shift
  pinned() { sed -n "s/.*\"$(echo "$1" | sed 's/[\/@]/\\&/g')\": \"\([^\"]*\)\".*/\1/p" "$dir/package.json"; }
  installed() { sed -n 's/.*"version": "\([^"]*\)".*/\1/p' "$dir/node_modules/$1/package.json" 2>/dev/null | head -1; }
  local current=1
  for pkg in "$@"; do
    [ "$(installed "$pkg")" = "$(pinned "$pkg")" ] || current=0
  done
  [ -f "$dir/node_modules/@2060.io/ffi-napi/build/Release/ffi_bindings.node" ] || current=0
  [ -f "$dir/node_modules/@2060.io/ref-napi/build/Release/binding.node" ] || current=0
  if [ "$current" = 0 ]; then
    log "installing Credo $(pinned @credo-ts/core) into $dir (install scripts skipped)"
    (cd "$dir" && npm ci --no-audit --no-fund --ignore-scripts --loglevel=error)
    log "building the ffi modules (npm rebuild)"
    (cd "$dir" && npm rebuild @2060.io/ref-napi @2060.io/ffi-napi --loglevel=error >/dev/null)
  fi
}
install "$root/tests/interop/credo" @credo-ts/core @credo-ts/didcomm @credo-ts/askar @openwallet-foundation/askar-nodejs
install "$root/tests/interop/credo05" @credo-ts/core @credo-ts/node @credo-ts/askar @credo-ts/push-notifications \
  @openwallet-foundation/askar-nodejs

if [ ! -f "$askar_dir/libaries_askar.so" ]; then
  log "fetching libaries_askar.so from the PyPI wheel aries-askar==$askar_version into $askar_dir"
  tmp="$(mktemp -d)"
  trap 'rm -rf "$tmp"' EXIT
  # pip only downloads here (no install): the wheel is py3-none, any pip on the machine will do.
  "$root/.venv/bin/python" -m pip download -q --disable-pip-version-check --no-deps --only-binary=:all: \
    --platform "manylinux2014_$(uname -m)" "aries-askar==$askar_version" -d "$tmp" 2> >(grep -v "is ignored" >&2)
  mkdir -p "$askar_dir"
  "$root/.venv/bin/python" - "$tmp" "$askar_dir" <<'PY'
import pathlib, sys, zipfile
src, dest = pathlib.Path(sys.argv[1]), pathlib.Path(sys.argv[2])
[wheel] = src.glob("aries_askar-*.whl")
with zipfile.ZipFile(wheel) as z:
    (dest / "libaries_askar.so").write_bytes(z.read("aries_askar/libaries_askar.so"))
PY
fi
test -f "$root/tests/interop/credo/node_modules/@credo-ts/didcomm/package.json"
test -f "$root/tests/interop/credo05/node_modules/@credo-ts/push-notifications/package.json"
test -f "$askar_dir/libaries_askar.so"
