"""Credo 0.6.3 (npm, DIDComm v1) as an independent mediation client, or as a mediator on an HTTP port (the
benchmark's peer): one `node credo_agent.mjs` process per agent, driven by JSON lines
(tests/interop/credo/credo_agent.mjs says which). And Credo 0.5.19 with @credo-ts/push-notifications 0.7.1
as a push-registration client (`start_push_agent`, tests/interop/credo05/credo_push_agent.mjs). Both are
installed by scripts/ensure_extra_credo.sh."""

from __future__ import annotations

import itertools
import json
import os
import queue
import secrets
import subprocess
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path

from apps.wire.encoding import b58encode
from tests.support.servers import ROOT

VERSION = "0.6.3"
DIR = Path(__file__).resolve().parent / "credo"
SCRIPT = DIR / "credo_agent.mjs"
PUSH_VERSION = "0.7.1"  # @credo-ts/push-notifications, on @credo-ts/core 0.5.19
PUSH_DIR = Path(__file__).resolve().parent / "credo05"
PUSH_SCRIPT = PUSH_DIR / "credo_push_agent.mjs"
ENSURE = ROOT / "scripts" / "ensure_extra_credo.sh"
ASKAR_LIB_DIR = ROOT / "var" / "cache" / "aries-askar-0.4.6"


def installed_version(pkg_dir: Path = DIR / "node_modules" / "@credo-ts" / "didcomm") -> str | None:
    """The version of the package at `pkg_dir` (default: @credo-ts/didcomm under tests/interop/credo), or None
    (run scripts/ensure_extra_credo.sh)."""
    pkg = pkg_dir / "package.json"
    return json.loads(pkg.read_text())["version"] if pkg.exists() else None


def ensure_installed() -> None:
    """Run scripts/ensure_extra_credo.sh (quick when installed); raise with its output when it fails."""
    done = subprocess.run([str(ENSURE)], capture_output=True, text=True)
    push = installed_version(PUSH_DIR / "node_modules" / "@credo-ts" / "push-notifications")
    if done.returncode != 0 or installed_version() != VERSION or push != PUSH_VERSION:
        raise RuntimeError(f"Credo {VERSION} and {PUSH_VERSION} are not installed:\n{done.stdout}{done.stderr}")


@dataclass
class CredoAgent:
    """A running Credo agent: `call` sends a command and waits for its answer; `events` queues the rest."""

    label: str
    wallet: Path
    wallet_key: str
    proc: subprocess.Popen
    log_path: Path
    events: queue.Queue = field(default_factory=queue.Queue)
    seen: list[dict] = field(default_factory=list)
    _answers: dict[int, queue.Queue] = field(default_factory=dict)
    _ids: itertools.count = field(default_factory=lambda: itertools.count(1))

    def _read(self) -> None:
        for line in self.proc.stdout:
            try:
                obj = json.loads(line)
            except ValueError:
                continue  # Credo's own console output
            if not isinstance(obj, dict):
                continue  # Credo's own console output that happens to parse
            if "id" in obj and obj["id"] in self._answers:
                self._answers[obj["id"]].put(obj)
            else:
                self.seen.append(obj)
                self.events.put(obj)

    def log(self) -> str:
        return self.log_path.read_text(errors="replace") if self.log_path.exists() else ""

    def call(self, cmd: str, timeout: float = 40, **args) -> dict:
        """Run one command in the agent and return its answer (fails on `ok: false`)."""
        n = next(self._ids)
        self._answers[n] = answer = queue.Queue()
        self.proc.stdin.write(json.dumps({"id": n, "cmd": cmd, **args}) + "\n")
        self.proc.stdin.flush()
        try:
            result = answer.get(timeout=timeout)
        except queue.Empty:
            raise AssertionError(
                f"{self.label}: no answer to {cmd} in {timeout} s; log:\n{self.log()[-4000:]}"
            ) from None
        assert result["ok"], f"{self.label} {cmd}: {result.get('error')}"
        return result

    def wait_event(self, match: dict, timeout: float = 30) -> dict:
        """The next event whose fields include `match` (earlier non-matching events stay in `seen`)."""
        deadline = time.monotonic() + timeout
        while (left := deadline - time.monotonic()) > 0:
            try:
                event = self.events.get(timeout=left)
            except queue.Empty:
                break
            if event.get("event") == "fatal":
                raise RuntimeError(f"{self.label} died: {event['error']}")
            if all(event.get(k) == v for k, v in match.items()):
                return event
        raise AssertionError(f"{self.label}: no event {match} in {timeout} s; seen {self.seen}\n{self.log()[-4000:]}")

    def stop(self) -> None:
        if self.proc.poll() is None:
            try:
                self.call("shutdown", timeout=15)
            except (AssertionError, BrokenPipeError, OSError):
                pass
            try:
                self.proc.wait(timeout=10)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait(timeout=5)


def start_agent(
    tmp_path: Path,
    label: str,
    *,
    mediator_invitation: str | None = None,
    pickup: str = "PickUpV2",
    polling_interval_ms: int = 1000,
    wallet_key: str | None = None,
    mediator_port: int | None = None,
    own_session: bool = False,
) -> CredoAgent:
    """Start a Credo agent whose askar wallet is a sqlite file under `tmp_path/credo-<label>` (so a restart with
    the same label and key is the same agent) and wait until it has initialised. With `mediator_port` it is a
    mediator serving HTTP there; `own_session` starts it in a session of its own (its pid is the session id)."""
    home = tmp_path / f"credo-{label}"
    home.mkdir(parents=True, exist_ok=True)
    wallet = home / "wallet.sqlite"
    # A raw askar store key: 32 random bytes in base58 (what askar's generate_raw_key returns).
    key = wallet_key or b58encode(secrets.token_bytes(32))
    config = {
        "label": label,
        "walletPath": str(wallet),
        "walletKey": key,
        "mediatorInvitationUrl": mediator_invitation,
        "pickup": pickup,
        "pollingIntervalMs": polling_interval_ms,
        "mediatorPort": mediator_port,
    }
    return _spawn(tmp_path, label, key, wallet, SCRIPT, config, own_session=own_session)


def start_push_agent(tmp_path: Path, label: str, *, mediator_invitation: str) -> CredoAgent:
    """Start a Credo 0.5 agent with @credo-ts/push-notifications (its askar wallet under `tmp_path/credo05-<label>`)
    that gets mediation from `mediator_invitation`, and wait until it has initialised."""
    home = tmp_path / f"credo05-{label}"
    home.mkdir(parents=True, exist_ok=True)
    key = b58encode(secrets.token_bytes(32))
    config = {"label": label, "home": str(home), "walletKey": key, "mediatorInvitationUrl": mediator_invitation}
    return _spawn(tmp_path, label, key, home, PUSH_SCRIPT, config)


def _spawn(
    tmp_path: Path, label: str, key: str, wallet: Path, script: Path, config: dict, *, own_session: bool = False
) -> CredoAgent:
    log_path = tmp_path / f"credo-{label}.log"
    log = log_path.open("ab")
    env = {**os.environ, "LIB_ASKAR_PATH": str(ASKAR_LIB_DIR)}
    proc = subprocess.Popen(
        ["node", str(script), json.dumps(config)],
        cwd=script.parent,
        env=env,
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        stderr=log,
        text=True,
        bufsize=1,
        start_new_session=own_session,
    )
    agent = CredoAgent(label, wallet, key, proc, log_path)
    threading.Thread(target=agent._read, daemon=True).start()
    try:
        agent.wait_event({"event": "ready"}, timeout=60)
    except BaseException:
        agent.stop()
        raise
    return agent
