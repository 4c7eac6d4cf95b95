"""The image's HEALTHCHECK (Containerfile, docs/containers.md): GET /health of this container's
role, exit 0 on 200 and 1 otherwise, within 3 s. The role is read from the container's processes
(one role per container, scripts/container_role.sh): Granian answers on HTTP_PORT, Daphne (which
serves /health too) on the port of its `-p`. The worker and beat have no port: healthy while their
process runs (the container ends when it does not). Standard library only: it runs every interval."""

from __future__ import annotations

import os
import sys
import urllib.request
from pathlib import Path


def role_port() -> int | None:
    """The port of this container's HTTP or sockets process, None for a role without one."""
    for proc in Path("/proc").iterdir():
        if not proc.name.isdigit():
            continue
        try:
            argv = (proc / "cmdline").read_bytes().split(b"\0")
        except OSError:
            continue
        if b"mediator_project.http_server" in argv:
            return int(os.environ.get("HTTP_PORT", "8000"))
        if b"mediator_project.socket_server" in argv and b"-p" in argv:
            return int(argv[argv.index(b"-p") + 1])
    return None


def main() -> int:
    port = role_port()
    if port is None:
        return 0
    try:
        with urllib.request.urlopen(f"http://127.0.0.1:{port}/health", timeout=3) as reply:
            return 0 if reply.status == 200 else 1
    except OSError:
        return 1


if __name__ == "__main__":
    sys.exit(main())
