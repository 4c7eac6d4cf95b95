#!/usr/bin/env bash
# make image (docs/containers.md): the application image from wheels made on the host.
#   IMAGE       the tag (localhost/mediator:latest)
#   BASE_IMAGE  the base of both stages (Containerfile's default, python:3.11-slim-bookworm)
#   LOCAL_BASE=1  build and use the Debian base of scripts/build_base_image.sh instead (no registry)
#   SPARK=1     also the engine's image (Containerfile.spark), tagged $SPARK_IMAGE
# The wheels are made again only when requirements.txt changed (var/image/wheels, kept).
set -euo pipefail
cd "$(dirname "$0")/.."
IMAGE="${IMAGE:-localhost/mediator:latest}"
SPARK_IMAGE="${SPARK_IMAGE:-localhost/mediator-spark:latest}"
VENV="${VENV:-.venv}"
log() { echo "[build_image] $*"; }
# One build at a time per checkout: two at once (two test workers, or make image twice) would
# remove each other's wheels and base tarball; the second waits and then finds the cached layers.
mkdir -p var/image
exec 9>var/image/.build.lock
flock 9
scripts/ensure_extra_podman.sh >/dev/null
WHEELS=var/image/wheels
stamp="$(sha256sum requirements.txt | cut -c1-16)"
if [ "$(cat "$WHEELS/.requirements" 2>/dev/null)" != "$stamp" ]; then
  log "pip wheel -r requirements.txt -> $WHEELS"
  rm -rf "$WHEELS" && mkdir -p "$WHEELS"
  # async-timeout: what redis needs on a Python older than 3.11.3, such as Debian bookworm's 3.11.2
  # (the local base), which pip on a newer host Python leaves out.
  "$VENV/bin/pip" wheel -q --disable-pip-version-check -r requirements.txt "async-timeout>=4.0.3" -w "$WHEELS" \
    2> >(grep -v "^WARNING: Location" >&2)
  echo "$stamp" > "$WHEELS/.requirements"
fi
args=()
if [ "${LOCAL_BASE:-0}" = 1 ]; then
  BASE_TAG="${BASE_TAG:-localhost/mediator-base:bookworm}" scripts/build_base_image.sh
  BASE_IMAGE="${BASE_TAG:-localhost/mediator-base:bookworm}"
fi
[ -n "${BASE_IMAGE:-}" ] && args+=(--build-arg "BASE_IMAGE=$BASE_IMAGE")
# --format docker: the OCI format has no HEALTHCHECK (podman drops it with a warning).
log "building $IMAGE ${BASE_IMAGE:+on $BASE_IMAGE}"
scripts/podman.sh build -q --format docker --network host --ulimit nofile=16384:16384 "${args[@]}" -f Containerfile -t "$IMAGE" . >/dev/null
if [ "${SPARK:-0}" = 1 ]; then
  log "building $SPARK_IMAGE"
  scripts/podman.sh build -q --format docker --network host --ulimit nofile=16384:16384 "${args[@]}" --build-arg "APP_IMAGE=$IMAGE" \
    -f Containerfile.spark -t "$SPARK_IMAGE" . >/dev/null
fi
log "built $IMAGE"
