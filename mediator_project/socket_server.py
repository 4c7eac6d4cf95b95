"""The WebSocket tier (and the embedded default's HTTP): Daphne, with incoming message limits the
application's own cap governs (docs/serving.md).

    python -m mediator_project.socket_server -b 127.0.0.1 -p 8001   # any `daphne` option
    python -m mediator_project.socket_server -b 127.0.0.1 -p 8001 --reuse-port   # one of several on the port

Daphne's own limit on an incoming WebSocket message (and frame) is 1 MiB, below the application's
body cap (MEDIATOR_MAX_BODY_BYTES, 6 MiB), and over it Daphne drops the connection without a
close frame: a 2 MiB forward over `/didcomm/ws` would vanish where `POST /didcomm` takes it. Here
Daphne's limit is `MESSAGE_LIMIT_FACTOR` times that cap, so every frame up to the cap is handled and
one over it still reaches the consumer, which answers it as the protocol says (`/didcomm/ws`:
`e.p.xfer.too-big`, the socket stays open; `/ws`: AUTH_FAILED). Only a message over the server's
limit never reaches the application, which bounds what one socket can make a process buffer: its
socket is closed with 1009 (message too big, RFC 6455 §7.4.1; `WebSocketFactory` below), where
Daphne's autobahn would drop the TCP connection without a close frame.

A TCP port listens with a backlog of `LISTEN_BACKLOG` (Twisted's default is 50: a storm's connects
beyond it waited for their SYN's retransmission). With `--reuse-port` the port is bound with
SO_REUSEPORT, so that several processes serve one port and the kernel spreads new connections over
them (docs/serving.md "Several socket processes on one port").

Daphne's HTTP (the embedded default's) goes through `Factory` and `Request` below: Twisted's parts
Daphne never uses are left out.

On SIGTERM (a restart, a scale-in, `podman stop`, a Kubernetes rollout) `DrainingServer` first
sends every open WebSocket a close frame, 1012 (service restart), and waits up to
`DRAIN_SECONDS` for the clients' closing handshakes; Daphne alone cancelled the applications and
dropped the connections without one, which a client sees as 1006 (abnormal closure). Clients
reconnect to another process and get their backlog after AUTH_SUCCESS (docs/realtime.md).
"""

from __future__ import annotations

import logging
import os
import socket
import sys
import time
from typing import Any

import daphne.cli
import daphne.server
from autobahn.websocket.types import ConnectionDeny
from daphne.cli import CommandLineInterface
from daphne.http_protocol import HTTPFactory, WebRequest
from daphne.ws_protocol import WebSocketFactory as DaphneWebSocketFactory
from daphne.ws_protocol import WebSocketProtocol
from django.conf import settings
from twisted.internet import defer, task
from twisted.internet import reactor as _reactor

# A frame over the application's cap must still reach the application to get its answer.
MESSAGE_LIMIT_FACTOR = 2
APPLICATION = "mediator_project.asgi:application"
log = logging.getLogger("mediator.socket_server")
# The close code every open socket gets on shutdown: the standard "service restart, reconnect".
SHUTDOWN_CLOSE_CODE = 1012
# How long shutdown waits for the clients' closing handshakes before Daphne drops what is left.
DRAIN_SECONDS = 5.0
# The running reactor (Daphne installs the asyncio one on import); its interface stubs do not
# describe the module-level object.
reactor: Any = _reactor


# The listen backlog of a TCP port: a reconnect storm's SYNs wait here for accept(). Twisted's default
# (50) made connects beyond it wait for the client's SYN retransmission (1 s, then 3 s). The kernel
# caps it at net.core.somaxconn (docs/serving.md "File descriptors and backlog").
LISTEN_BACKLOG = 4096
# Bind the TCP port with SO_REUSEPORT: several processes listen on one port, the kernel spreads new
# connections over them (docs/serving.md). Ours, taken out before Daphne parses its options.
REUSE_PORT_OPTION = "--reuse-port"


def listening_socket(host: str, port: int) -> int:
    """A TCP socket listening on (host, port) with SO_REUSEPORT; its descriptor, for Daphne's `fd:`
    endpoint (which adopts and closes it)."""
    sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEPORT, 1)
    sock.bind((host, port))
    sock.listen(LISTEN_BACKLOG)
    return sock.detach()


def endpoint_strings(reuse_port: bool):
    """Daphne's `build_endpoint_description_strings`, with `LISTEN_BACKLOG` on a TCP port and, when
    `reuse_port`, the port bound with SO_REUSEPORT (IPv4 only)."""

    def build(host=None, port=None, unix_socket=None, file_descriptor=None) -> list[str]:
        out = []
        if port is not None and host:
            if reuse_port:
                if ":" in host:
                    raise SystemExit(f"{REUSE_PORT_OPTION} takes an IPv4 address, got {host}")
                out.append(f"fd:fileno={listening_socket(host, int(port))}")
            else:
                escaped = host.strip("[]").replace(":", r"\:")
                out.append(f"tcp:port={int(port)}:interface={escaped}:backlog={LISTEN_BACKLOG}")
        if unix_socket:
            out.append(f"unix:{unix_socket}:backlog={LISTEN_BACKLOG}")
        if file_descriptor is not None:
            out.append(f"fd:fileno={int(file_descriptor)}")
        return out

    return build


def message_limit() -> int:
    """Daphne's limit on one incoming WebSocket message and frame, in bytes."""
    return MESSAGE_LIMIT_FACTOR * settings.MEDIATOR_MAX_BODY_BYTES


def arguments(argv: list[str]) -> list[str]:
    """Daphne's command line: the message limits first (an explicit option given later wins),
    then `argv`, then the application unless `argv` names one."""
    limit = str(message_limit())
    args = ["--websocket-max-message-size", limit, "--websocket-max-frame-size", limit, *argv]
    if not any(a.endswith(":application") for a in argv):
        args.append(APPLICATION)
    return args


class Request(WebRequest):
    """Daphne's request without Twisted's parsing of a POST form body into `request.args`, which
    Daphne never reads (the application parses its own body, as under Granian). For it Twisted
    parses the Content-Type of every POST through the `email` package, the largest single cost of
    Daphne's own handling of `POST /didcomm`, and it answered a body that was not the multipart its
    Content-Type said with a bare 400 of its own."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, parsePOSTFormSubmission=False, **kwargs)


class Factory(HTTPFactory):
    """Daphne's HTTP factory, with `Request`, and without the access-log line Twisted formats for
    every request when Daphne sends Twisted's log nowhere (verbosity 0 and 1; Daphne's own access
    log is `--access-log`)."""

    def buildProtocol(self, addr: Any) -> Any:
        protocol = super().buildProtocol(addr)
        protocol.requestFactory = Request
        return protocol

    def log(self, request: Any) -> None:
        if self.server.verbosity > 1:
            super().log(request)


class ServerWebSocketProtocol(WebSocketProtocol):
    """Daphne's WebSocket protocol, closing with the codes a server may send that autobahn's
    `sendClose` refuses (it takes only 1000 and 3000-4999): 1012 (service restart) and 1013 (try
    again later: over capacity, apps/realtime/admission.py), with the application's close reason,
    which Daphne drops for every code.

    A handshake the application has not accepted within Daphne's connect timeout is refused with
    HTTP 503 (Service Unavailable), not Daphne's 403 ("Access denied", which a client may take
    for a permanent refusal): the consumers accept before they wait on anything, so only a process
    too busy to run them gets there (docs/realtime.md "Capacity")."""

    SERVER_CODES = frozenset({1012, 1013})

    def check_timeouts(self) -> None:
        if self.state == self.STATE_CONNECTING and self.duration() > self.server.websocket_connect_timeout:
            self.handshake_deferred.errback(ConnectionDeny(code=503, reason="Service Unavailable"))
            del self.handshake_deferred
            self.server.protocol_disconnected(self)
            log.warning("websocket handshake not accepted within %ss: 503", self.server.websocket_connect_timeout)
            return
        super().check_timeouts()

    def handle_reply(self, message: dict) -> None:
        if message.get("type") == "websocket.close" and self.state != self.STATE_CONNECTING:
            code, reason = message.get("code"), message.get("reason")
            if code in self.SERVER_CODES:
                self.sendCloseFrame(code=code, reasonUtf8=reason.encode("utf-8") if reason else None, isReply=False)
                return
        super().handle_reply(message)


class WebSocketFactory(DaphneWebSocketFactory):
    """Daphne's WebSocket factory, failing a connection with a close frame instead of by dropping it
    (autobahn's `failByDrop`): a message over the limit gets 1009, a protocol error 1002, an
    invalid UTF-8 text 1007, each as RFC 6455 §7.1.7 allows. The rest of the oversized message is
    read and discarded, not buffered, until the close handshake ends (autobahn's 1 s timeout)."""

    protocol = ServerWebSocketProtocol

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        # Server.run sets its options after construction; it passes no failByDrop, so this one stays.
        self.setProtocolOptions(failByDrop=False)


class DrainingServer(daphne.server.Server):
    """Daphne's server, closing every open WebSocket with `SHUTDOWN_CLOSE_CODE` before it stops."""

    def run(self) -> None:
        # Registered before Daphne's own trigger (which cancels the applications): triggers of a
        # phase run in order, and the shutdown waits for the Deferred this one returns.
        reactor.addSystemEventTrigger("before", "shutdown", self.close_websockets)
        super().run()

    def open_websockets(self) -> list[Any]:
        return [p for p in self.connections if isinstance(p, WebSocketProtocol) and p.state == p.STATE_OPEN]

    def close_websockets(self) -> defer.Deferred | None:
        sockets = self.open_websockets()
        log.info("closing %d open websockets with %d", len(sockets), SHUTDOWN_CLOSE_CODE)
        for protocol in sockets:
            # The frame itself: autobahn's sendClose accepts only 1000 and 3000-4999 (Daphne sends its
            # 1011 the same way).
            protocol.sendCloseFrame(code=SHUTDOWN_CLOSE_CODE, isReply=False)
        if not sockets:
            return None
        deadline = time.monotonic() + DRAIN_SECONDS

        def wait() -> defer.Deferred | None:
            if any(p.state != p.STATE_CLOSED for p in sockets) and time.monotonic() < deadline:
                return task.deferLater(reactor, 0.05, wait)
            return None

        return task.deferLater(reactor, 0.05, wait)


class DrainingCommandLine(CommandLineInterface):
    server_class = DrainingServer


def main() -> None:
    os.environ.setdefault("DJANGO_SETTINGS_MODULE", "mediator_project.settings")
    # Daphne's Server builds its factory by this name and has no option for another.
    daphne.server.HTTPFactory = Factory  # type: ignore[misc]
    daphne.server.WebSocketFactory = WebSocketFactory  # type: ignore[misc]
    argv = sys.argv[1:]
    reuse_port = REUSE_PORT_OPTION in argv
    daphne.cli.build_endpoint_description_strings = endpoint_strings(reuse_port)  # type: ignore[assignment]
    DrainingCommandLine().run(arguments([a for a in argv if a != REUSE_PORT_OPTION]))


if __name__ == "__main__":
    main()
