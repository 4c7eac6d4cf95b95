"""Real server processes for end-to-end tests: Daphne (and later Celery) on free ports,
pointed at the pytest-django test database so they see what the test commits."""

from __future__ import annotations

import os
import signal
import socket
import subprocess
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path

import httpx
from django.db import connection

ROOT = Path(__file__).resolve().parents[2]


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def test_database_url() -> str:
    """URL of the database the current test run uses (the pytest-django test DB)."""
    s = connection.settings_dict
    return f"postgresql://{s['USER'] or 'postgres'}@{s['HOST'] or '127.0.0.1'}:{s['PORT'] or 5432}/{s['NAME']}"


def server_env(extra: dict | None = None) -> dict:
    env = dict(os.environ)
    env.update(
        {
            "DJANGO_SETTINGS_MODULE": "mediator_project.settings_test",
            "TEST_DATABASE_URL": test_database_url(),
            "PYTHONPATH": str(ROOT),
            "PYTHONUNBUFFERED": "1",
        }
    )
    env.update(extra or {})
    return env


@dataclass
class Server:
    port: int
    proc: subprocess.Popen
    log_path: Path
    env: dict = field(default_factory=dict)

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    @property
    def ws_url(self) -> str:
        return f"ws://127.0.0.1:{self.port}/ws"

    def log(self) -> str:
        return self.log_path.read_text(errors="replace") if self.log_path.exists() else ""

    def stop(self, sig: int = signal.SIGTERM) -> None:
        if self.proc.poll() is None:
            self.proc.send_signal(sig)
            try:
                self.proc.wait(timeout=10)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait(timeout=5)

    def kill9(self) -> None:
        self.stop(signal.SIGKILL)


def start_daphne(tmp_path: Path, *, port: int | None = None, env: dict | None = None, wait_host: str | None = None) -> Server:
    """Start `daphne mediator_project.asgi:application` and wait until /health answers."""
    port = port or free_port()
    log_path = tmp_path / f"daphne-{port}.log"
    full_env = server_env(env)
    proc = subprocess.Popen(
        [sys.executable, "-m", "daphne", "-b", "127.0.0.1", "-p", str(port), "mediator_project.asgi:application"],
        cwd=ROOT,
        env=full_env,
        stdout=log_path.open("wb"),
        stderr=subprocess.STDOUT,
    )
    server = Server(port=port, proc=proc, log_path=log_path, env=full_env)
    deadline = time.time() + 30
    headers = {"Host": wait_host} if wait_host else {}
    while time.time() < deadline:
        if proc.poll() is not None:
            raise RuntimeError(f"daphne exited early:\n{server.log()}")
        try:
            if httpx.get(server.url + "/health", timeout=1, headers=headers).status_code in (200, 503):
                return server
        except httpx.HTTPError:
            pass
        time.sleep(0.2)
    server.stop()
    raise RuntimeError(f"daphne did not start:\n{server.log()}")
