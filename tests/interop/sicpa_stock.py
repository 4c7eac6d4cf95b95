"""Drive a stock SICPA client (`didcomm` 0.3.2 + `peerdid` 0.5.2, PyPI) as a subprocess in var/sicpa-venv:
tests/interop/sicpa/stock_client.py (its header says what each command does). Install with
scripts/ensure_extra_sicpa.sh (run by scripts/ensure_services.sh).
"""

from __future__ import annotations

import json
import queue
import subprocess
import threading
from pathlib import Path

from tests.interop.didcomm_node import SICPA_PYTHON, Party

SCRIPT = Path(__file__).resolve().parent / "sicpa" / "stock_client.py"
VERSIONS = {"didcomm": "0.3.2", "peerdid": "0.5.2"}


def installed_versions() -> dict[str, str] | None:
    """The versions of `didcomm` and `peerdid` in var/sicpa-venv, or None (run scripts/ensure_extra_sicpa.sh)."""
    if not SICPA_PYTHON.exists():
        return None
    code = "import importlib.metadata as m, json; print(json.dumps({n: m.version(n) for n in ('didcomm', 'peerdid')}))"
    out = subprocess.run([str(SICPA_PYTHON), "-c", code], capture_output=True, text=True, timeout=60)
    return json.loads(out.stdout) if out.returncode == 0 else None


class StockClient:
    """A running stock_client.py: `call` sends one command and returns its answer; every answer is kept in `events`."""

    def __init__(self):
        self.proc = subprocess.Popen(
            [str(SICPA_PYTHON), "-W", "ignore", str(SCRIPT)],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )
        self.events: list[dict] = []
        self._answers: queue.Queue[dict | None] = queue.Queue()
        self._stderr: list[str] = []
        threading.Thread(target=self._read_stdout, daemon=True).start()
        threading.Thread(target=lambda: self._stderr.extend(self.proc.stderr), daemon=True).start()

    def _read_stdout(self) -> None:
        for line in self.proc.stdout:
            if line.strip():
                self._answers.put(json.loads(line))
        self._answers.put(None)

    def call(self, op: str, timeout: float = 60, **args) -> dict:
        """Run one command; an `error` answer or the program's exit fails with what it said."""
        self.proc.stdin.write(json.dumps({"op": op, **args}) + "\n")
        self.proc.stdin.flush()
        try:
            answer = self._answers.get(timeout=timeout)
        except queue.Empty:
            raise AssertionError(f"no answer to {op!r} within {timeout} s; stderr: {self.stderr()}") from None
        if answer is None:
            raise AssertionError(f"the SICPA client exited during {op!r}; stderr: {self.stderr()}")
        self.events.append(answer)
        if answer["event"] == "error":
            raise AssertionError(f"the SICPA client failed {op!r}: {answer['error']}; wire: {answer['wire']}")
        return answer

    def note(self, event: dict) -> None:
        """Put an event of our own into the transcript, in order."""
        self.events.append(event)

    def stderr(self) -> str:
        return "".join(self._stderr)[-3000:]

    def close(self) -> None:
        if self.proc.poll() is None:
            try:
                self.proc.stdin.write(json.dumps({"op": "exit"}) + "\n")
                self.proc.stdin.flush()
                self.proc.wait(timeout=10)
            except (OSError, subprocess.TimeoutExpired):
                self.proc.kill()
                self.proc.wait(timeout=5)


def transcript(*, client: StockClient, mediator: Party, public_url: str) -> dict:
    """A recorded run as test data: every party's (test) keys and every exchange in order, wire bytes included."""
    parties = client.call("keys")["parties"]
    return {
        "source": (
            f"SICPA didcomm {VERSIONS['didcomm']} + peerdid {VERSIONS['peerdid']} (PyPI, stock) driven by "
            "tests/interop/sicpa/stock_client.py against a Daphne server; recorded by tests/interop/test_sicpa_e2e.py; "
            "every key is a throwaway test key"
        ),
        "public_url": public_url,
        "parties": {"mediator": mediator.to_json()}
        | {name: Party.from_json(p).to_json() for name, p in parties.items()},
        "events": [e for e in client.events if e["event"] != "keys"],
    }
