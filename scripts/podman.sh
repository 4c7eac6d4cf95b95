#!/usr/bin/env bash
# podman with the project's settings (deploy/podman/containers.conf: runc, cgroupfs, host
# networking, an explicit nofile limit), for make image, the container test and an operator's
# host that, like CI here, has no systemd as PID 1. `scripts/podman.sh ps`, as podman itself.
set -euo pipefail
export CONTAINERS_CONF="${CONTAINERS_CONF:-$(cd "$(dirname "$0")/.." && pwd)/deploy/podman/containers.conf}"
exec podman "$@"
