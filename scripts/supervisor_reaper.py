"""supervisord event listener of the production layout (deploy/supervisord.conf.template).

supervisord starts every program in its own process group and restarts a program whose main
process died. What that process had forked is not its concern: a SIGKILLed nginx master leaves
its worker serving on the listening socket, so the new master cannot bind and the program goes
FATAL; an orphaned Granian worker holds the port for a while too. On every EXITED or STOPPED
event this listener ends the rest of the dead process's group (SIGTERM, SIGKILL after 5 s).
systemd does the same with its control groups (KillMode=control-group, deploy/systemd/).
"""

from __future__ import annotations

import os
import signal
import sys
import threading
import time

from supervisor import childutils

GRACE_S = 5.0


def group_alive(pgid: int) -> bool:
    try:
        os.killpg(pgid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


def reap(name: str, pgid: int) -> None:
    """SIGTERM what is left of process group `pgid`, SIGKILL it if it outlives GRACE_S."""
    if pgid <= 1 or not group_alive(pgid):
        return
    print(f"reaper: ending what {name} (pid {pgid}) left in its process group", file=sys.stderr, flush=True)
    try:
        os.killpg(pgid, signal.SIGTERM)
    except ProcessLookupError:
        return
    deadline = time.monotonic() + GRACE_S
    while time.monotonic() < deadline:
        if not group_alive(pgid):
            return
        time.sleep(0.1)
    try:
        os.killpg(pgid, signal.SIGKILL)
    except ProcessLookupError:
        pass


def main() -> None:
    while True:
        headers, payload = childutils.listener.wait(sys.stdin, sys.stdout)
        if headers["eventname"] in ("PROCESS_STATE_EXITED", "PROCESS_STATE_STOPPED"):
            fields = childutils.get_headers(payload.split("\n", 1)[0])
            pid = int(fields.get("pid", "0"))
            threading.Thread(target=reap, args=(fields.get("processname", "?"), pid), daemon=True).start()
        childutils.listener.ok(sys.stdout)


if __name__ == "__main__":
    main()
