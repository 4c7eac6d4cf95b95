#!/usr/bin/env bash
# A local stand-in for the public base image the Containerfile defaults to
# (python:3.11-slim-bookworm), for machines that reach Debian's packages but no container
# registry: a Debian bookworm minbase root filesystem made by debootstrap, with Debian's Python
# 3.11, imported into podman as $BASE_TAG (default localhost/mediator-base:bookworm). The tarball
# is kept in var/image/ and reused while it exists (remove it to make a fresh one). Root only.
set -euo pipefail
cd "$(dirname "$0")/.."
BASE_TAG="${BASE_TAG:-localhost/mediator-base:bookworm}"
MIRROR="${DEBIAN_MIRROR:-http://deb.debian.org/debian}"
OUT=var/image
TARBALL="$OUT/base-bookworm.tar"
log() { echo "[build_base_image] $*"; }
mkdir -p "$OUT"
exec 9>"$OUT/.base.lock"  # one debootstrap at a time (build_image.sh holds its own lock too)
flock 9
if podman image exists "$BASE_TAG"; then
  log "$BASE_TAG already present"
  exit 0
fi
if [ ! -s "$TARBALL" ]; then
  root="$(mktemp -d "$OUT/rootfs.XXXXXX")"
  trap 'rm -rf "$root"' EXIT
  log "debootstrap bookworm minbase into $root"
  debootstrap --variant=minbase --include=python3,python3-venv,ca-certificates,tzdata \
    bookworm "$root" "$MIRROR" >"$OUT/debootstrap.log" 2>&1 || { tail -20 "$OUT/debootstrap.log"; exit 1; }
  # What a slim image leaves out: apt's lists and caches, documentation, man pages, locales.
  chroot "$root" apt-get clean
  rm -rf "$root"/var/lib/apt/lists/* "$root"/var/cache/apt/* "$root"/usr/share/doc/* "$root"/usr/share/man/* \
    "$root"/usr/share/info/* "$root"/var/log/*.log
  find "$root/usr/share/locale" -mindepth 1 -maxdepth 1 ! -name 'C.*' -exec rm -rf {} + 2>/dev/null || true
  tar -C "$root" --numeric-owner -cf "$TARBALL.part" . && mv "$TARBALL.part" "$TARBALL"
fi
log "importing $TARBALL as $BASE_TAG"
podman import -q --change 'CMD ["/bin/bash"]' --change 'ENV LANG=C.UTF-8' "$TARBALL" "$BASE_TAG" >/dev/null
