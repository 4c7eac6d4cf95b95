"""ACA-Py 1.7.0 (its own Python >= 3.13 venv, var/acapy-venv) as an independent DIDComm v1 agent, or as a
mediator (the benchmark's peer): start it, drive it through its admin API, collect its webhooks. Installed
by scripts/ensure_extra_acapy.sh."""

from __future__ import annotations

import json
import os
import secrets
import subprocess
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

import httpx

from tests.support.servers import ROOT, free_port

VERSION = "1.7.0"
VENV = Path(os.environ.get("ACAPY_VENV", ROOT / "var" / "acapy-venv"))
ENSURE = ROOT / "scripts" / "ensure_extra_acapy.sh"


def ensure_installed() -> Path:
    """Run scripts/ensure_extra_acapy.sh (quick when installed) and return the `aca-py` path; raise with the
    script's own words when it cannot install (no Python >= 3.13 on the machine)."""
    done = subprocess.run([str(ENSURE)], capture_output=True, text=True, env={**os.environ, "ACAPY_VENV": str(VENV)})
    if done.returncode != 0:
        raise RuntimeError(f"ACA-Py {VERSION} is not installed:\n{done.stdout}{done.stderr}")
    return VENV / "bin" / "aca-py"


class WebhookSink:
    """A local HTTP server that takes ACA-Py's webhooks (`POST /topic/<topic>/`) and keeps them in order."""

    def __init__(self) -> None:
        self.events: list[tuple[str, dict]] = []
        self._lock = threading.Lock()
        sink = self

        class Handler(BaseHTTPRequestHandler):
            def do_POST(self):  # noqa: N802 (http.server's naming)
                body = self.rfile.read(int(self.headers.get("Content-Length") or 0))
                topic = self.path.strip("/").split("/")[1] if self.path.startswith("/topic/") else self.path
                with sink._lock:
                    sink.events.append((topic, json.loads(body or b"{}")))
                self.send_response(200)
                self.send_header("Content-Length", "0")
                self.end_headers()

            def log_message(self, *args):
                pass

        self.server = ThreadingHTTPServer(("127.0.0.1", free_port()), Handler)
        self.url = f"http://127.0.0.1:{self.server.server_address[1]}"
        threading.Thread(target=self.server.serve_forever, daemon=True).start()

    def of(self, topic: str) -> list[dict]:
        with self._lock:
            return [body for t, body in self.events if t == topic]

    def close(self) -> None:
        self.server.shutdown()
        self.server.server_close()


@dataclass
class AcaPyAgent:
    """One running `aca-py start` process with its inbound HTTP transport, admin API and webhook sink."""

    label: str
    port: int
    admin_port: int
    proc: subprocess.Popen
    log_path: Path
    webhooks: WebhookSink
    admin: httpx.Client = field(init=False)

    def __post_init__(self) -> None:
        self.admin = httpx.Client(base_url=f"http://127.0.0.1:{self.admin_port}", timeout=20)

    @property
    def endpoint(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def log(self) -> str:
        return self.log_path.read_text(errors="replace") if self.log_path.exists() else ""

    def log_tail(self, chars: int = 4000) -> str:
        """The end of the agent's log without its admin API's access lines (the tests poll that API
        every 0.2 s: a failure's tail would show nothing else)."""
        return "".join(line for line in self.log().splitlines(keepends=True) if "aiohttp.access" not in line)[-chars:]

    def get(self, path: str, **params) -> dict:
        resp = self.admin.get(path, params=params)
        assert resp.status_code == 200, f"GET {path}: {resp.status_code} {resp.text}"
        return resp.json()

    def post(self, path: str, body: dict | None = None, **params) -> dict:
        resp = self.admin.post(path, json=body if body is not None else {}, params=params)
        assert resp.status_code in (200, 201), f"POST {path}: {resp.status_code} {resp.text}"
        return resp.json()

    def wait_for(self, what: str, probe: Callable[[], object], timeout: float = 30) -> object:
        """Call `probe` until it returns something truthy; fail with the agent's log tail after `timeout` s."""
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if self.proc.poll() is not None:
                raise RuntimeError(f"{self.label} exited while waiting for {what}:\n{self.log_tail()}")
            if result := probe():
                return result
            time.sleep(0.2)
        raise AssertionError(f"{self.label}: no {what} after {timeout} s; log tail:\n{self.log_tail()}")

    def stop(self) -> None:
        self.admin.close()
        if self.proc.poll() is None:
            self.proc.terminate()
            try:
                self.proc.wait(timeout=10)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait(timeout=5)
        self.webhooks.close()


# The last line Conductor.start logs, after the wallet upgrade and the mediation setup.
STARTED_LINE = "acapy_agent.core.conductor INFO Listening..."


def start_agent(
    tmp_path: Path,
    label: str,
    *,
    mediator_invitation: str | None = None,
    mediator: bool = False,
    own_session: bool = False,
    log_level: str = "info",
) -> AcaPyAgent:
    """Start an ACA-Py agent with an askar sqlite wallet under `tmp_path`, auto-accepting invitations and
    requests, and wait until it has started (about 6 s here): its admin API says ready and, when it
    logs at info or below, its log says "Listening...". With `mediator` it grants every mediation
    request and keeps forwards for recipients without an endpoint until they pick them up;
    `own_session` starts it in a session of its own (its pid is the session id).

    The admin API says ready as soon as its server is up, which Conductor.start does before the
    wallet upgrade every fresh wallet gets: that upgrade reads every connection record and saves it
    back. An invitation given in between (the tests give one at once) made a connection record that
    the upgrade could save back over a newer state, e.g. "invitation" over "request", and the
    DID Exchange response was then refused ("Cannot accept connection response for connection in
    state") and the connection never completed. "Listening..." is the last line of Conductor.start."""
    aca_py = ensure_installed()
    port, admin_port, webhooks = free_port(), free_port(), WebhookSink()
    home = tmp_path / f"acapy-{label}"
    home.mkdir(parents=True, exist_ok=True)
    log_path = tmp_path / f"acapy-{label}.log"
    # fmt: off
    cmd = [
        str(aca_py), "start",
        "--label", label,
        "--inbound-transport", "http", "127.0.0.1", str(port),
        "--outbound-transport", "http",
        "--endpoint", f"http://127.0.0.1:{port}",
        "--admin", "127.0.0.1", str(admin_port), "--admin-insecure-mode",
        "--webhook-url", webhooks.url,
        "--no-ledger",
        "--wallet-type", "askar", "--wallet-name", label, "--wallet-key", secrets.token_hex(16), "--auto-provision",
        "--auto-accept-invites", "--auto-accept-requests", "--auto-ping-connection",
        "--log-level", log_level,
    ]
    # fmt: on
    if mediator:
        cmd += ["--open-mediation", "--enable-undelivered-queue"]
    if mediator_invitation:
        cmd += ["--mediator-invitation", mediator_invitation]
    # ACAPY_HOME keeps the sqlite wallet in the test's directory (the default is ~/.acapy_agent).
    env = {**os.environ, "ACAPY_HOME": str(home), "PYTHONUNBUFFERED": "1"}
    proc = subprocess.Popen(
        cmd, cwd=home, env=env, stdout=log_path.open("wb"), stderr=subprocess.STDOUT, start_new_session=own_session
    )
    agent = AcaPyAgent(label, port, admin_port, proc, log_path, webhooks)
    try:
        agent.wait_for("admin API", lambda: _ready(agent), timeout=45)
        if log_level in ("debug", "info"):
            agent.wait_for("the end of its start", lambda: STARTED_LINE in agent.log(), timeout=45)
    except BaseException:
        agent.stop()
        raise
    return agent


def _ready(agent: AcaPyAgent) -> bool:
    try:
        return agent.admin.get("/status/ready", timeout=1).json().get("ready") is True
    except (httpx.HTTPError, ValueError):
        return False
