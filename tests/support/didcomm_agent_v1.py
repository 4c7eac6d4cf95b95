"""A DIDComm v1 (Aries) agent on apps/didcomm/core only, for the tests: a did:peer:4 like ACA-Py's, RFC 0019
envelopes, and a local HTTP endpoint that records what the mediator POSTs to it."""

from __future__ import annotations

import json
import threading
import uuid
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

from apps.didcomm.core import envelope_v1
from apps.didcomm.core.did_peer import peer4_didcomm_v1
from apps.didcomm.core.keys import ED25519, PrivateKey
from apps.didcomm.core.message_v1 import key_to_verkey
from apps.wire.encoding import b58encode

BASE = "https://didcomm.org/"
DIDX = BASE + "didexchange/1.1/"
CM1 = BASE + "coordinate-mediation/1.0/"
PICKUP2 = BASE + "messagepickup/2.0/"
PICKUP1 = BASE + "messagepickup/1.0/"
FORWARD = BASE + "routing/1.0/forward"
ENVELOPE = "application/didcomm-envelope-enc"
QUEUE_ENDPOINT = "didcomm:transport/queue"  # what an agent without inbound transport (Credo) publishes


class AgentV1:
    def __init__(self, endpoint: str = QUEUE_ENDPOINT):
        self.key = PrivateKey.generate(ED25519)
        self.verkey = b58encode(self.key.public.raw)
        self.did_key = "did:key:" + self.key.public.multibase
        self.did = peer4_didcomm_v1(self.key.public, [endpoint])

    def message(self, type_: str, *, return_route: str | None = "all", **fields) -> dict:
        msg = {"@type": type_, "@id": str(uuid.uuid4()), **fields}
        if return_route:
            msg["~transport"] = {"return_route": return_route}
        return msg

    def didx_request(self, invitation: dict, **kw) -> dict:
        msg = self.message(DIDX + "request", label="agent", did=self.did, **kw)
        msg["~thread"] = {"thid": msg["@id"], "pthid": invitation["@id"]}
        return msg

    def pack(self, message: dict, to_key: str, *, anon: bool = False) -> bytes:
        env = envelope_v1.pack(
            json.dumps(message).encode(), to_verkeys=[key_to_verkey(to_key)], sender=None if anon else self.key
        )
        return json.dumps(env).encode()

    def unpack(self, body: bytes | str | dict) -> tuple[dict, str | None]:
        env = json.loads(body) if isinstance(body, bytes | str) else body
        out = envelope_v1.unpack(env, private_key_for=lambda kid: self.key if kid == self.verkey else None)
        return json.loads(out.message), out.sender_verkey


def forward_to(recipient_key: str, routing_key: str, inner: dict, *, to: str | None = None) -> bytes:
    """A routing/1.0 forward of `inner` for `recipient_key`, anoncrypt to the routing key (as ACA-Py sends)."""
    fwd = {"@type": FORWARD, "@id": str(uuid.uuid4()), "to": to or key_to_verkey(recipient_key), "msg": inner}
    env = envelope_v1.pack(json.dumps(fwd).encode(), to_verkeys=[key_to_verkey(routing_key)])
    return json.dumps(env).encode()


class Inbox:
    """A real local HTTP server standing for an agent's endpoint: records bodies, answers `status`."""

    def __init__(self, status: int = 200):
        self.status = status
        self.bodies: list[tuple[str, bytes]] = []
        inbox = self

        class Handler(BaseHTTPRequestHandler):
            def do_POST(self):  # noqa: N802 - http.server's name
                body = self.rfile.read(int(self.headers.get("Content-Length", "0")))
                inbox.bodies.append((self.headers.get("Content-Type", ""), body))
                self.send_response(inbox.status)
                self.send_header("Content-Length", "0")
                self.end_headers()

            def log_message(self, *args):
                pass

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.url = f"http://127.0.0.1:{self.server.server_address[1]}/agent"
        self.thread = threading.Thread(target=self.server.serve_forever, daemon=True)
        self.thread.start()

    def close(self) -> None:
        self.server.shutdown()
        self.server.server_close()
