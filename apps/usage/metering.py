"""The metering observer: every finished command or message (`records.Record`) becomes one `CommandMeter` row.

Hot path: `observe()` only appends the (immutable) Record to an in-process buffer: no I/O,
no model instance, no lock beyond a deque append; rows are built by the writer. A daemon thread bulk-inserts the buffer every USAGE_METERING_FLUSH_MS or
as soon as USAGE_METERING_BATCH rows are waiting, on one connection while commands keep coming
(closed after an interval without any). Mode "sync" instead inserts one row inside the
request (simpler, costs one INSERT per command); "off" does nothing.

Accepted loss: rows buffered in a process that is SIGKILLed (at most one flush interval) are lost;
metering is usage accounting, not billing-grade. The buffer is capped: past USAGE_METERING_MAX_BUFFER
rows new records are dropped and counted, so a dead database never grows memory without bound.
A row the database refuses (e.g. a value PostgreSQL text cannot hold) is dropped and counted on its
own; the rest of its batch is still written, and the writer thread survives any exception.
"""

from __future__ import annotations

import atexit
import logging
import threading
from collections import deque

from django.conf import settings
from django.db import DataError, IntegrityError, close_old_connections, connection, transaction

from apps.wire.display import printable

from .models import LABEL_MAX, SENDER_DID_MAX, CommandMeter
from .records import Record

log = logging.getLogger("mediator.usage.metering")

_buffer: deque[Record] = deque()  # records waiting for the writer
# Held for the whole drain+insert so `flush()` returns only after every earlier record is stored.
_flush_lock = threading.Lock()
_wake = threading.Event()
_thread: threading.Thread | None = None
_thread_lock = threading.Lock()
# Counters of this process (counts only, never a row's content):
dropped = 0  # records refused because the buffer was full
rejected = 0  # rows the database (or the row builder) refused: dropped one by one, the rest written
lost = 0  # rows of batches that failed as a whole (database unreachable), never retried

_COLUMNS = (
    "tenant_id", "at", "transport", "protocol", "channel", "command_type", "code",
    "http_status", "bytes_in", "bytes_out", "duration_ms", "sender_did",
)  # fmt: skip
# Their PostgreSQL types, for the binary COPY (tests/usage/test_metering_writers.py checks them
# against the table); text goes into the varchar columns, whose lengths still apply.
_COPY_TYPES = (
    "int8", "timestamptz", "text", "text", "text", "text", "text",
    "int2", "int4", "int4", "float8", "text",
)  # fmt: skip


_INT2_MAX, _INT4_MAX = 2**15 - 1, 2**31 - 1


def _in_range(value: int, top: int) -> int:
    """`value` if its column holds it; a binary COPY would wrap it silently, so refuse it here."""
    if not 0 <= value <= top:
        raise OverflowError("metering value out of its column's range")
    return value


def _values(record: Record) -> tuple:
    """The metadata of a record as one row's values, in _COLUMNS order; OverflowError for a
    number its column cannot hold (counted as rejected by `_store`)."""
    return (
        record.tenant_id,
        record.at,
        printable(record.transport or "")[:8],
        record.protocol,
        printable(record.channel or "")[:32],
        # A client chooses its message type: control characters stored escaped (wire.display).
        printable(record.command_type or "")[:LABEL_MAX],
        printable(record.code or "")[:LABEL_MAX],
        _in_range(record.http_status, _INT2_MAX),
        _in_range(max(0, int(record.bytes_in)), _INT4_MAX),
        _in_range(max(0, int(record.bytes_out)), _INT4_MAX),
        float(record.duration_ms),
        # None unless the signature verified (records.Record): stored as NULL, never "".
        record.sender_did[:SENDER_DID_MAX] if record.sender_did else None,
    )


def observe(record: Record) -> None:
    """Request-record observer (records.OBSERVERS): meter one command's or message's metadata."""
    global dropped
    if record.tenant_id is None:
        return
    mode = settings.USAGE_METERING_MODE
    if mode == "sync":
        _store([record])
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
    """Insert every buffered row now, in the calling thread; returns how many were written.

    A row the database refuses is dropped and counted (`rejected`) and the rest of its batch is
    written. A batch that fails as a whole (the database is unreachable) is counted in `lost` and
    the error raised."""
    global lost
    written = 0
    with _flush_lock:
        # Only what is buffered now: under load records keep arriving while a batch is written, and
        # chasing them wrote a string of small COPYs, each its own transaction, per wake-up.
        waiting = len(_buffer)
        while waiting:
            records: list[Record] = []
            while waiting and len(records) < settings.USAGE_METERING_BATCH:
                waiting -= 1
                record = _buffer.popleft()
                if record.tenant_id is not None:
                    records.append(record)
            try:
                written += _store(records)
            except Exception:
                lost += len(records)
                raise
    return written


def _store(records: list[Record]) -> int:
    """Write `records`, dropping and counting those that cannot be stored; returns rows written."""
    global rejected
    rows = []
    for record in records:
        try:
            rows.append(_values(record))
        except (AttributeError, TypeError, ValueError, OverflowError):
            rejected += 1
    written = _store_rows(rows)
    if written < len(records):
        log.warning("metering dropped %d rows that could not be stored", len(records) - written)
    return written


def _store_rows(rows: list[tuple]) -> int:
    """Insert `rows`; if the database refuses their data, halve until the bad rows are alone and
    drop those: a few statements per bad row instead of losing the batch.
    Any other error (connection lost, table missing) is not the rows' fault and is raised."""
    global rejected
    if not rows:
        return 0
    try:
        if connection.in_atomic_block:
            # A refused statement would abort the caller's transaction (flush() from a test or a
            # request); a savepoint keeps it usable. In autocommit each statement stands alone.
            with transaction.atomic():
                copy_rows(rows)
        else:
            copy_rows(rows)
        return len(rows)
    except (DataError, IntegrityError):
        if len(rows) == 1:
            rejected += 1
            return 0
        half = len(rows) // 2
        return _store_rows(rows[:half]) + _store_rows(rows[half:])


def copy_rows(rows: list[tuple]) -> None:
    """One binary COPY per batch. A portable INSERT (executemany, a multi-row INSERT, bulk_create)
    costs the writer thread several times the CPU per row, and the binary format less than the text
    one (the values are not formatted as text, nor parsed back)."""
    sql = f"COPY {CommandMeter._meta.db_table} ({', '.join(_COLUMNS)}) FROM STDIN (FORMAT BINARY)"
    # psycopg's own exceptions (a value out of its column type's range, raised before sending)
    # and the server's (a NUL in a text value) become Django's, so that a refused row is told
    # apart from a lost connection.
    with connection.cursor() as cur, connection.wrap_database_errors, cur.cursor.copy(sql) as copy:
        copy.set_types(_COPY_TYPES)
        for row in rows:
            copy.write_row(row)


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
    """The writer thread: never dies, whatever a flush or a connection close raises."""
    interval = settings.USAGE_METERING_FLUSH_MS / 1000
    while True:
        _wake.wait(interval)
        _wake.clear()
        if not _buffer:
            # A whole interval without a command: do not keep an idle connection open from this
            # thread between bursts. While commands keep coming the connection stays open: opening
            # one per flush (4 a second per process) cost a new PostgreSQL backend each time.
            # Closing can be refused like the flush itself (pytest blocks database access between
            # tests); the thread must survive that too.
            try:
                connection.close()
            except Exception:  # noqa: BLE001 - see above
                pass
            continue
        try:
            # A connection PostgreSQL ended while this thread kept it is replaced (as at a request's start).
            close_old_connections()
            flush()
        except Exception as exc:  # noqa: BLE001 - metadata only, never re-raised into the command path
            # The batch that failed as a whole is counted in `lost`. RuntimeError: database access
            # refused (e.g. outside a test that allows it). Only the type: a message may quote a row.
            log.warning("metering flush failed: %s (%d rows lost so far)", type(exc).__name__, lost)


@atexit.register
def _flush_at_exit() -> None:
    if _buffer:
        try:
            flush()
        except Exception:  # noqa: BLE001 - interpreter shutdown, best effort
            pass
