#!/usr/bin/env bash
# podman, runc and debootstrap for the container image and its test (docs/containers.md,
# tests/containers/): Debian's packages when missing, plus podman-compose (pinned in
# requirements-dev.txt) in the venv. Safe to run repeatedly; installs only what is absent.
set -euo pipefail
cd "$(dirname "$0")/.."
log() { echo "[ensure_extra_podman] $*"; }
missing=()
command -v podman >/dev/null 2>&1 || missing+=(podman)
command -v runc >/dev/null 2>&1 || missing+=(runc)
command -v debootstrap >/dev/null 2>&1 || missing+=(debootstrap)
command -v fuse-overlayfs >/dev/null 2>&1 || missing+=(fuse-overlayfs)
# catatonit: the pause process of a pod (podman kube play)
[ -x /usr/libexec/podman/catatonit ] || command -v catatonit >/dev/null 2>&1 || missing+=(catatonit)
if [ "${#missing[@]}" -gt 0 ]; then
  log "installing ${missing[*]}"
  DEBIAN_FRONTEND=noninteractive apt-get -o DPkg::Lock::Timeout=600 update -qq
  DEBIAN_FRONTEND=noninteractive apt-get -o DPkg::Lock::Timeout=600 install -y -qq --no-install-recommends \
    "${missing[@]}" uidmap slirp4netns containernetworking-plugins >/dev/null
fi
VENV="${VENV:-.venv}"
"$VENV/bin/python" -c 'import podman_compose' 2>/dev/null || "$VENV/bin/pip" install -q "$(grep -oE '^podman-compose==[^ ]+' requirements-dev.txt)"
command -v podman >/dev/null && command -v debootstrap >/dev/null && command -v runc >/dev/null
