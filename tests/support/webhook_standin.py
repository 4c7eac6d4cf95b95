"""A strict loopback stand-in for an operator's push gateway behind the webhook provider
(apps/push/providers/webhook.py, docs/push.md "Webhook"): it checks what a gateway should check
(the X-Mediator-Signature HMAC over the received bytes with the shared secret, a timestamp within
TOLERANCE_S of its clock, the JSON body's exact keys and types) and refuses anything else with
400/401. It records what it accepted and answers a device token as scripted (`answer`: 410
dead, 429 with Retry-After, 500).
"""

from __future__ import annotations

import hashlib
import hmac
import json
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

TOLERANCE_S = 300
KEYS = {"type", "tenant", "service", "token", "platform", "visible", "title_loc_key", "body_loc_key", "collapse_id"}


class _Handler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"

    def do_POST(self) -> None:  # noqa: N802 - http.server's name
        length = int(self.headers.get("content-length") or 0)
        raw = self.rfile.read(length)
        status, headers = self.server.standin.handle(
            self.headers.get("content-type"), self.headers.get("x-mediator-signature"), raw
        )  # type: ignore[attr-defined]
        self.send_response(status)
        for name, value in headers.items():
            self.send_header(name, value)
        self.send_header("content-length", "0")
        self.end_headers()

    def log_message(self, format, *args):  # noqa: A002
        pass


class WebhookStandin:
    """The gateway on 127.0.0.1 (`url`) with shared `secret`."""

    def __init__(self, secret: str) -> None:
        self.secret = secret
        self.accepted: list[dict] = []
        self.refused: list[str] = []
        self.answers: dict[str, tuple[int, dict[str, str]]] = {}
        self._lock = threading.Lock()
        self._httpd = ThreadingHTTPServer(("127.0.0.1", 0), _Handler)
        self._httpd.daemon_threads = True
        self._httpd.standin = self  # type: ignore[attr-defined]
        self.url = f"http://127.0.0.1:{self._httpd.server_address[1]}/wake"
        self._thread = threading.Thread(target=self._httpd.serve_forever, args=(0.05,), daemon=True)
        self._thread.start()

    def close(self) -> None:
        self._httpd.shutdown()
        self._httpd.server_close()

    def answer(self, token: str, status: int, headers: dict[str, str] | None = None) -> None:
        """Answer wakes of `token` with `status` (and headers) from now on."""
        self.answers[token] = (status, headers or {})

    def _refuse(self, why: str, status: int = 401) -> tuple[int, dict[str, str]]:
        with self._lock:
            self.refused.append(why)
        return status, {}

    def handle(self, content_type: str | None, sig: str | None, raw: bytes) -> tuple[int, dict[str, str]]:
        if content_type != "application/json":
            return self._refuse("content-type", 400)
        try:
            parts = dict(p.split("=", 1) for p in (sig or "").split(","))
            t = int(parts["t"])
            v1 = parts["v1"]
        except (ValueError, KeyError):
            return self._refuse("signature header")
        expected = hmac.new(self.secret.encode(), f"{t}.".encode() + raw, hashlib.sha256).hexdigest()
        if not hmac.compare_digest(expected, v1):
            return self._refuse("signature")
        if abs(time.time() - t) > TOLERANCE_S:
            return self._refuse("timestamp")
        try:
            body = json.loads(raw)
        except ValueError:
            return self._refuse("json", 400)
        if not isinstance(body, dict) or set(body) != KEYS or body["type"] != "wake":
            return self._refuse("schema", 400)
        if not isinstance(body["token"], str) or not isinstance(body["visible"], bool):
            return self._refuse("schema", 400)
        answer = self.answers.get(body["token"], (200, {}))
        if answer[0] == 200:
            with self._lock:
                self.accepted.append(body)
        return answer
