"""The metering observer: every finished command becomes one `CommandMeter` row.

Hot path: `observe()` only appends the (immutable) CommandRecord to an in-process buffer: no I/O,
no model instance, no lock beyond a deque append; rows are built by the writer. A daemon thread bulk-inserts the buffer every USAGE_METERING_FLUSH_MS or
as soon as USAGE_METERING_BATCH rows are waiting. Mode "sync" instead inserts one row inside the
request (simpler, costs one INSERT per command); "off" does nothing. bench/metering_overhead.py
measures all three.

Accepted loss: rows buffered in a process that is SIGKILLed (at most one flush interval) are lost;
metering is usage accounting, not billing-grade. The buffer is capped: past USAGE_METERING_MAX_BUFFER
rows new records are dropped and counted, so a dead database never grows memory without bound.
"""

from __future__ import annotations

import atexit
import logging
import threading
from collections import deque
from typing import Any

from django.conf import settings
from django.db import DatabaseError, close_old_connections, connection

from .models import LABEL_MAX, SENDER_DID_MAX, CommandMeter

log = logging.getLogger("mediator.usage.metering")

_buffer: deque[Any] = deque()  # CommandRecords waiting for the writer
# Held for the whole drain+insert so `flush()` returns only after every earlier record is stored.
_flush_lock = threading.Lock()
_wake = threading.Event()
_thread: threading.Thread | None = None
_thread_lock = threading.Lock()
dropped = 0


def _row(record: Any) -> CommandMeter | None:
    """The metadata of a CommandRecord as an unsaved row; commands without a tenant are not metered."""
    if record.tenant_id is None:
        return None
    return CommandMeter(
        tenant_id=record.tenant_id,
        at=record.at,
        transport=(record.transport or "")[:8],
        channel=(record.channel or "")[:32],
        command_type=(record.command_type or "")[:LABEL_MAX],
        code=(record.code or "")[:LABEL_MAX],
        http_status=record.http_status,
        bytes_in=max(0, int(record.bytes_in)),
        bytes_out=max(0, int(record.bytes_out)),
        duration_ms=float(record.duration_ms),
        sender_did=(record.sender_did or "")[:SENDER_DID_MAX],
    )


def observe(record: Any) -> None:
    """hooks.OBSERVERS entry: record one command's metadata (never raises)."""
    global dropped
    if record.tenant_id is None:
        return
    mode = settings.USAGE_METERING_MODE
    if mode == "sync":
        CommandMeter.objects.bulk_create([_row(record)])
        return
    if mode != "buffered":
        return
    if len(_buffer) >= settings.USAGE_METERING_MAX_BUFFER:
        dropped += 1
        return
    _buffer.append(record)
    _ensure_thread()
    if len(_buffer) >= settings.USAGE_METERING_BATCH:
        _wake.set()


def flush() -> int:
    """Insert every buffered row now, in the calling thread; returns how many were written."""
    written = 0
    with _flush_lock:
        while _buffer:
            records = []
            while _buffer and len(records) < settings.USAGE_METERING_BATCH:
                record = _buffer.popleft()
                if record.tenant_id is not None:
                    records.append(record)
            if connection.vendor == "postgresql":
                _copy(records)
            else:
                CommandMeter.objects.bulk_create([_row(r) for r in records])
            written += len(records)
    return written


_COPY_COLUMNS = (
    "tenant_id", "at", "transport", "channel", "command_type", "code",
    "http_status", "bytes_in", "bytes_out", "duration_ms", "sender_did",
)  # fmt: skip


def _copy(records: list[Any]) -> None:
    """PostgreSQL: one COPY per batch. The ORM's bulk_create cost the writer thread about as much
    CPU as the commands it metered (docs/benchmarks.md, issue 8 profile)."""
    if not records:
        return
    sql = f"COPY {CommandMeter._meta.db_table} ({', '.join(_COPY_COLUMNS)}) FROM STDIN"
    with connection.cursor() as cur, cur.cursor.copy(sql) as copy:
        for r in records:
            copy.write_row(
                (
                    r.tenant_id,
                    r.at,
                    (r.transport or "")[:8],
                    (r.channel or "")[:32],
                    (r.command_type or "")[:LABEL_MAX],
                    (r.code or "")[:LABEL_MAX],
                    r.http_status,
                    max(0, int(r.bytes_in)),
                    max(0, int(r.bytes_out)),
                    float(r.duration_ms),
                    (r.sender_did or "")[:SENDER_DID_MAX],
                )
            )


def pending() -> int:
    """Rows waiting in this process's buffer."""
    return len(_buffer)


def _ensure_thread() -> None:
    global _thread
    if _thread is not None and _thread.is_alive():
        return
    with _thread_lock:
        if _thread is None or not _thread.is_alive():
            _thread = threading.Thread(target=_run, name="usage-metering", daemon=True)
            _thread.start()


def _run() -> None:
    interval = settings.USAGE_METERING_FLUSH_MS / 1000
    while True:
        _wake.wait(interval)
        _wake.clear()
        if not _buffer:
            continue
        try:
            flush()
        except (DatabaseError, RuntimeError) as exc:
            # RuntimeError: database access refused (e.g. outside a test that allows it). The batch
            # that failed is lost; metadata only, never re-raised into the command path.
            log.warning("metering flush failed: %s", type(exc).__name__)
        finally:
            # Do not keep an idle connection open from this thread between bursts. Closing can be
            # refused like the flush itself (pytest blocks database access between tests); the
            # thread must survive that too.
            if not _buffer:
                try:
                    close_old_connections()
                    connection.close()
                except (DatabaseError, RuntimeError):
                    pass


@atexit.register
def _flush_at_exit() -> None:
    if _buffer:
        try:
            flush()
        except Exception:  # noqa: BLE001 - interpreter shutdown, best effort
            pass
