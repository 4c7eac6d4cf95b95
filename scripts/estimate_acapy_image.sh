#!/usr/bin/env bash
# An estimate of ACA-Py's published image's compressed size where no registry is reachable
# (docs/containers.md): ACA-Py's own docker/Dockerfile final stage rebuilt on the local Debian
# bookworm base (scripts/build_base_image.sh, standing in for python:3.13-slim-bookworm): the same
# Debian packages, and acapy-agent[didcommv2] with its dependencies as the cp313 manylinux wheels
# from PyPI (installed on the host with pip --target, copied in). Prints the compressed size
# (gzip of `podman save`, as for our image) and the uncompressed one.
#
#   scripts/estimate_acapy_image.sh [acapy-agent version]
set -euo pipefail
cd "$(dirname "$0")/.."
VERSION="${1:-}"
BASE_TAG="${BASE_TAG:-localhost/mediator-base:bookworm}"
TAG=localhost/acapy-estimate:latest
OUT=var/image/acapy-estimate
PODMAN=(scripts/podman.sh)
rm -rf "$OUT" && mkdir -p "$OUT"
scripts/build_base_image.sh
.venv/bin/pip install -q --target "$OUT/site" --python-version 3.13 --implementation cp --abi cp313 \
  --platform manylinux_2_28_x86_64 --platform manylinux_2_17_x86_64 --platform manylinux2014_x86_64 \
  --platform manylinux_2_5_x86_64 --platform linux_x86_64 --only-binary=:all: \
  "acapy-agent[didcommv2]${VERSION:+==$VERSION}"
cat >"$OUT/Containerfile" <<CONTAINERFILE
FROM $BASE_TAG
RUN useradd -U -ms /bin/bash -u 1001 aries \\
 && apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends \\
    apt-transport-https build-essential ca-certificates curl git libffi-dev libgmp10 libncurses5 \\
    libncursesw5 libpq-dev libsqlcipher-dev openssl postgresql-client sqlite3 zlib1g >/dev/null \\
 && apt-get autoremove --purge -y && apt-get clean -y && rm -rf /var/lib/apt/lists/* /usr/share/doc/*
COPY --chown=1001:1001 site /home/aries/.local/lib/python3.13/site-packages
USER aries
CONTAINERFILE
"${PODMAN[@]}" build -q --format docker -t "$TAG" "$OUT" >/dev/null
compressed=$("${PODMAN[@]}" save "$TAG" | gzip | wc -c)
uncompressed=$("${PODMAN[@]}" image inspect "$TAG" --format '{{.Size}}')
echo "acapy-agent $(ls "$OUT/site" | sed -n 's/^acapy_agent-\(.*\)\.dist-info$/\1/p'): compressed $compressed bytes, uncompressed $uncompressed bytes"
