"""Exit 1 with one clear line when HOST:PORT cannot be bound (make run checks before it starts
anything, so nothing claims to be serving on a port another process holds)."""

import socket
import sys

host, port = sys.argv[1], int(sys.argv[2])
with socket.socket(socket.AF_INET6 if ":" in host else socket.AF_INET) as sock:
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    try:
        sock.bind((host, port))
    except OSError as exc:
        sys.exit(
            f"Cannot serve on {host}:{port}: {exc.strerror}. Stop the other server or choose a port: make run PORT=8010"
        )
