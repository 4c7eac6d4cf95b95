"""gunicorn's threaded worker, serving a kept-alive connection's next request in the same thread.

Stock `gthread` passes every request on a kept-alive connection through its main thread:
1. when a response is written, the connection goes back on the poller;
2. the main thread wakes when the next request arrives, takes the connection off the poller and
   submits it to the thread pool;
3. the pool's completion callback reaches the main thread again through a pipe.

Behind nginx, with one upstream connection per request in flight, reused last-in first-out, that
is several thread hand-offs, selector registrations and pipe writes per request, each needing the
GIL. Measured with callgrind on a hello-world app, this worker runs 18% fewer instructions per
request than `gthread` (591k against 722k). Through the production layout it gives about 5% more
TWO_WAY_PRIVATE throughput at the same VM speed (docs/benchmarks.md, issue 8).

`LingeringThreadWorker` keeps a kept-alive connection in its thread for a short while after each
response (`GUNICORN_KEEPALIVE_LINGER_MS`, default 20; 0 turns it off):
- if the next request arrives within that time, the same thread serves it at once;
- if it does not, or if other connections are already waiting for a thread, the connection goes
  back to gunicorn's poller exactly as in `gthread`.

A thread never lingers while work is queued, and never for longer than the linger. A request that
arrives on another connection meanwhile waits at most that long for a free thread, and only when
every thread is lingering. Everything else is gunicorn's own: request parsing, keep-alive limits,
`max_requests`, graceful shutdown and the worker timeout.
"""

from __future__ import annotations

import os
import select

from gunicorn.workers.gthread import ThreadWorker

LINGER_SECONDS = max(0.0, float(os.environ.get("GUNICORN_KEEPALIVE_LINGER_MS", "20")) / 1000.0)


class LingeringThreadWorker(ThreadWorker):
    linger = LINGER_SECONDS

    def _others_waiting(self) -> bool:
        """Whether connections submitted to the pool are still waiting for a thread."""
        work_queue = getattr(self.tpool, "_work_queue", None)
        return work_queue is None or not work_queue.empty()

    def _next_request_ready(self, conn) -> bool:
        if conn.parser.unreader.buf.getvalue():
            return True  # the client pipelined it: its bytes are already read
        if self._others_waiting():
            return False
        poller = select.poll()
        poller.register(conn.sock, select.POLLIN)
        return bool(poller.poll(self.linger * 1000.0))

    def handle(self, conn):
        keepalive = super().handle(conn)
        while (
            keepalive is True
            and self.alive
            and self.linger > 0
            and not conn.is_http2
            and self._next_request_ready(conn)
        ):
            keepalive = super().handle(conn)
        return keepalive
