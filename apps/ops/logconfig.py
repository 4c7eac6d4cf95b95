"""Logging helpers referenced from settings.LOGGING.

- PlainFormatter and JsonFormatter: one line per record (LOG_FORMAT=plain, the default, or json).
  Both write every control character of the message and of the structured fields as a visible
  escape (wire.display.printable): a value a client chose (a message `type`, a host) cannot end
  the line, forge the next one or drive a terminal. This is the one place for it, so log call
  sites pass values as they are. JSON lines carry the structured fields dispatch passes as
  `extra` (tenant, transport, command, code, status, duration_ms).
- code_path: where an unexpected exception was raised, for the log line of a request that
  answered a protocol error instead of a 500 (the exception's message may quote input, so it is
  not logged).
- ClientFaultFilter: Django logs a request it refuses as suspicious (a Host header that is not a
  host name, too many query parameters) at ERROR with a traceback; those are a client's faults,
  answered 400 (mediator_project/errors.py): the filter keeps the line at WARNING without it.
- RedactSqlFilter: Django's SQL debug log (django.db.backends at DEBUG) prints each statement
  with its parameters inlined, which would put payloads, ciphertexts, tags and signatures in the
  log. The filter rewrites those records to "(seconds) VERB table" and drops the `sql`/`params`
  attributes, so SQL debugging keeps timings and shapes but never values (docs/protocol-readings.md §9).
"""

from __future__ import annotations

import json
import logging
import re
import traceback
from datetime import UTC, datetime

from apps.wire.display import printable

# Extras that may be emitted: metadata only, never anything from a payload.
STRUCTURED_FIELDS = ("tenant", "transport", "command", "code", "status", "duration_ms", "job", "count")


def _printable_lines(text: str) -> str:
    """A traceback keeps its line breaks; every other control character is escaped."""
    return "\n".join(printable(line) for line in text.split("\n"))


class PlainFormatter(logging.Formatter):
    """`%(asctime)s %(levelname)s %(name)s %(message)s` with the message on one line."""

    def __init__(self, fmt: str = "%(asctime)s %(levelname)s %(name)s %(message)s", **kwargs) -> None:
        super().__init__(fmt, **kwargs)

    def formatMessage(self, record: logging.LogRecord) -> str:
        record.message = printable(record.message)
        return super().formatMessage(record)

    def formatException(self, ei) -> str:
        return _printable_lines(super().formatException(ei))


class JsonFormatter(logging.Formatter):
    """One JSON object per line; only whitelisted extras are copied."""

    def format(self, record: logging.LogRecord) -> str:
        out = {
            "ts": datetime.fromtimestamp(record.created, UTC).isoformat(timespec="milliseconds").replace("+00:00", "Z"),
            "level": record.levelname,
            "logger": record.name,
            "msg": printable(record.getMessage()),
        }
        for key in STRUCTURED_FIELDS:
            if key in record.__dict__:
                value = record.__dict__[key]
                out[key] = printable(value) if isinstance(value, str) else value
        if record.exc_info:
            out["exc"] = _printable_lines(self.formatException(record.exc_info))
        return json.dumps(out, ensure_ascii=False, separators=(",", ":"), default=str)


class ClientFaultFilter(logging.Filter):
    """See the module docstring."""

    def filter(self, record: logging.LogRecord) -> bool:
        if not record.name.startswith("django.security."):
            return True
        record.exc_info = None
        record.exc_text = None
        if record.levelno > logging.WARNING:
            record.levelno, record.levelname = logging.WARNING, "WARNING"
        return True


def code_path(exc: BaseException) -> str:
    """`file:line function <- …` from where `exc` was raised outward: the code path only, never
    the exception's message or a local value."""
    return " <- ".join(f"{f.filename}:{f.lineno} {f.name}" for f in reversed(traceback.extract_tb(exc.__traceback__)))


_SQL_SHAPE = re.compile(
    r"^\s*(?P<verb>SELECT|INSERT\s+INTO|UPDATE|DELETE\s+FROM|CREATE|ALTER|DROP|BEGIN|COMMIT|ROLLBACK|SAVEPOINT|RELEASE|SET|WITH)\b",
    re.IGNORECASE,
)
_TABLE = re.compile(r'\b(?:FROM|INTO|UPDATE|TABLE|JOIN)\s+"?([A-Za-z0-9_]+)"?', re.IGNORECASE)


def sql_shape(sql: object) -> str:
    """'SELECT messaging_pendingevent' for a statement: its verb and the tables it names (at most
    four, in order), never a value. Table names come only from identifiers after FROM/INTO/
    UPDATE/TABLE/JOIN, so a literal in the statement cannot end up here."""
    text = str(sql or "")
    m = _SQL_SHAPE.match(text)
    verb = " ".join(m.group("verb").upper().split()) if m else "SQL"
    tables = list(dict.fromkeys(t.group(1) for t in _TABLE.finditer(_strip_literals(text))))[:4]
    return f"{verb} {', '.join(tables)}" if tables else verb


_LITERAL = re.compile(r"'(?:[^']|'')*'")


def _strip_literals(sql: str) -> str:
    """Drop quoted literals first, so that e.g. "VALUES ('from x')" names no table x."""
    return _LITERAL.sub("''", sql)


class RedactSqlFilter(logging.Filter):
    """Rewrite django.db.backends records so that no statement text or parameter is logged."""

    def filter(self, record: logging.LogRecord) -> bool:
        if not record.name.startswith("django.db.backends") or record.__dict__.get("sql_redacted"):
            return True
        record.sql_redacted = True  # the logger's filter and the handler's both see it: once is enough
        sql = record.__dict__.pop("sql", None)
        record.__dict__.pop("params", None)
        duration = record.__dict__.get("duration")
        if sql is None and isinstance(record.args, tuple) and len(record.args) >= 2:
            sql = record.args[1]
        shape = sql_shape(sql) if sql is not None else "statement"
        if isinstance(duration, (int, float)):
            record.msg, record.args = "(%.3f) %s", (duration, shape)
        else:
            record.msg, record.args = "%s", (shape,)
        return True
