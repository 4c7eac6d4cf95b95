"""Drive the Identus SDK 7.0.0 (npm) as an independent DIDComm v2 recipient: `node tests/interop/identus/recipient.mjs`.

The program speaks JSON lines (events on stdout, commands on stdin); see its header. Install it with
scripts/ensure_extra_identus.sh (run by scripts/ensure_services.sh).
"""

from __future__ import annotations

import base64
import json
import queue
import subprocess
import threading
import time
from pathlib import Path

from apps.didcomm.core.keys import ED25519, X25519, PrivateKey
from tests.interop import didcomm_node
from tests.interop.didcomm_node import Party

IDENTUS_DIR = Path(__file__).resolve().parent / "identus"
SCRIPT = IDENTUS_DIR / "recipient.mjs"
VERSION = "7.0.0"


def installed_version() -> str | None:
    """The SDK version under tests/interop/identus, or None (run scripts/ensure_extra_identus.sh)."""
    pkg = IDENTUS_DIR / "node_modules" / "@hyperledger" / "identus-sdk" / "package.json"
    return json.loads(pkg.read_text())["version"] if pkg.exists() else None


def selftest(invitation: dict | str, timeout: float = 60) -> dict:
    """Offline: the SDK parses `invitation` (OOB 2.0 JSON or its `?_oob=` URL), resolves its DID and makes a
    peer DID of its own."""
    out = subprocess.run(
        ["node", str(SCRIPT), "--selftest", invitation if isinstance(invitation, str) else json.dumps(invitation)],
        cwd=IDENTUS_DIR,
        capture_output=True,
        text=True,
        timeout=timeout,
    )
    events = [json.loads(line) for line in out.stdout.splitlines() if line.strip()]
    if out.returncode != 0 or not events or events[-1]["event"] != "selftest":
        raise RuntimeError(f"identus selftest failed: {out.stdout[-2000:]} {out.stderr[-2000:]}")
    return events[-1]


class IdentusRecipient:
    """A running recipient.mjs. `expect` waits for the next event of a kind; every event is kept in `events`."""

    def __init__(self, invitation_url: str, *, record: bool = False):
        argv = ["node", str(SCRIPT), invitation_url] + (["--record"] if record else [])
        self.proc = subprocess.Popen(
            argv,
            cwd=IDENTUS_DIR,
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )
        self.events: list[dict] = []
        self._queue: queue.Queue[dict | None] = queue.Queue()
        self._stderr: list[str] = []
        threading.Thread(target=self._read_stdout, daemon=True).start()
        threading.Thread(target=lambda: self._stderr.extend(self.proc.stderr), daemon=True).start()

    def _read_stdout(self) -> None:
        for line in self.proc.stdout:
            if line.strip():
                event = json.loads(line)
                self.events.append(event)
                self._queue.put(event)
        self._queue.put(None)

    def expect(self, kind: str, timeout: float = 30) -> dict:
        """The next `kind` event; an `error` event or the program's exit fails with its stderr."""
        deadline = time.monotonic() + timeout
        while True:
            try:
                event = self._queue.get(timeout=max(0.0, deadline - time.monotonic()))
            except queue.Empty:
                raise AssertionError(f"no {kind!r} from Identus within {timeout} s; {self._diagnosis()}") from None
            if event is None:
                raise AssertionError(f"Identus exited before {kind!r}; {self._diagnosis()}")
            if event["event"] == "error":
                raise AssertionError(f"Identus reported {event['error']}; {self._diagnosis()}")
            if event["event"] == kind:
                return event

    def command(self, command: str) -> None:
        self.proc.stdin.write(command + "\n")
        self.proc.stdin.flush()

    def note(self, event: dict) -> None:
        """Put an event of our own (e.g. what a sender posted) into the transcript, in order."""
        self.events.append(event)

    def of_kind(self, kind: str) -> list[dict]:
        return [e for e in self.events if e["event"] == kind]

    def _diagnosis(self) -> str:
        seen = [e["event"] for e in self.events if e["event"] != "wire"]
        return f"events {seen}; stderr: {''.join(self._stderr)[-3000:]}"

    def close(self) -> None:
        if self.proc.poll() is None:
            try:
                self.command("exit")
                self.proc.wait(timeout=10)
            except (OSError, subprocess.TimeoutExpired):
                self.proc.kill()
                self.proc.wait(timeout=5)


def sdk_party(did: str, keys: list[dict]) -> Party:
    """One of the SDK's DIDs with the private keys its `keys` event reported (X25519 agreement, Ed25519 auth)."""
    by_curve = {k["curve"]: base64.urlsafe_b64decode(k["raw"] + "=" * (-len(k["raw"]) % 4)) for k in keys}
    return Party(
        did, PrivateKey.from_secret(X25519, by_curve["X25519"]), PrivateKey.from_secret(ED25519, by_curve["Ed25519"])
    )


def transcript(*, recipient: IdentusRecipient, mediator: Party, senders: dict[str, Party], public_url: str) -> dict:
    """A recorded run as test data: every party's (test) keys and every event in order, wire bytes included."""
    [keys] = recipient.of_kind("keys")
    mediated = recipient.of_kind("mediated")[0]
    peer_did = recipient.of_kind("ready")[0]["peer_did"]
    return {
        "source": (
            f"@hyperledger/identus-sdk {VERSION} (npm) driven by tests/interop/identus/recipient.mjs --record, "
            f"the senders didcomm-node {didcomm_node.VERSION} and SICPA didcomm 0.3.2, against a Daphne server; recorded by "
            "tests/interop/test_identus_e2e.py; every key is a throwaway test key"
        ),
        "public_url": public_url,
        "parties": {
            "mediator": mediator.to_json(),
            "host": sdk_party(mediated["host_did"], keys["keys"][mediated["host_did"]]).to_json(),
            "peer": sdk_party(peer_did, keys["keys"][peer_did]).to_json(),
        }
        | {name: party.to_json() for name, party in senders.items()},
        "events": [e for e in recipient.events if e["event"] != "keys"],
    }
