"""The load generator's minimal HTTP client (bench/loadgen.py RawHTTP) reads what real servers send."""

from __future__ import annotations

import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import pytest

from bench.loadgen import RawHTTP


class Handler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"

    def log_message(self, *args):
        pass

    def do_POST(self):
        body = self.rfile.read(int(self.headers["Content-Length"]))
        mode = body.split(b":", 1)[0]
        if mode == b"chunked":
            self.send_response(201)
            self.send_header("Transfer-Encoding", "chunked")
            self.end_headers()
            for part in (b"ab", b"cdef"):
                self.wfile.write(f"{len(part):x}\r\n".encode() + part + b"\r\n")
            self.wfile.write(b"0\r\n\r\n")
            return
        reply = b"echo " + body + b" host=" + self.headers["Host"].encode()
        self.send_response(409 if mode == b"conflict" else 200)
        self.send_header("Content-Length", str(len(reply)))
        if mode == b"close":
            self.send_header("Connection", "close")
            self.close_connection = True
        self.end_headers()
        self.wfile.write(reply)


@pytest.fixture
def server():
    httpd = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    threading.Thread(target=httpd.serve_forever, daemon=True).start()
    yield httpd.server_address
    httpd.shutdown()


def test_keep_alive_lengths_chunks_and_close(server):
    host, port = server
    client = RawHTTP(host, port, "tenant.example:80")
    assert client.send(client.request_bytes(b"plain")) == (200, b"echo plain host=tenant.example:80")
    sock = client.sock
    assert client.send(client.request_bytes(b"conflict:x")) == (409, b"echo conflict:x host=tenant.example:80")
    assert client.send(client.request_bytes(b"chunked:")) == (201, b"abcdef")
    assert client.sock is sock  # one kept-alive connection so far
    assert client.send(client.request_bytes(b"close:")) == (200, b"echo close: host=tenant.example:80")
    assert client.sock is None
    assert client.send(client.request_bytes(b"again")) == (200, b"echo again host=tenant.example:80")
    client.close()
