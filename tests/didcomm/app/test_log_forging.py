"""A value a client chooses (a DIDComm message `type`) cannot forge a log line or put control
characters in a metering column: the log formatters and the metering row builder write every
control character as a visible escape."""

from __future__ import annotations

import json
import logging

import pytest
from django.test import override_settings

from apps.ops.logconfig import JsonFormatter, PlainFormatter
from apps.usage import metering
from apps.usage.models import CommandMeter
from apps.usage.records import DIDCOMM_V2 as CHANNEL
from apps.wire.display import printable

FORGED = (
    "https://didcomm.org/x/1.0/y\n2026-11-28 20:00:00,000 WARNING mediator.ops ADMIN login ok\r\x1b[2J\x00\x9b\u2028"
)
CONTROLS = ("\n", "\r", "\x1b", "\x00", "\x9b", "\u2028")
# What the attack sent: a short type (at most 64 characters after https://didcomm.org/) is logged.
FORGED_TYPE = "https://didcomm.org/x/1.0/y\nWARNING mediator.ops ADMIN login ok\r\x1b[2J\x00"


def _record(msg: str, *args, **extra) -> logging.LogRecord:
    record = logging.LogRecord("mediator.didcomm", logging.INFO, __file__, 1, msg, args, None)
    record.__dict__.update(extra)
    return record


def test_printable_escapes_every_control_character_and_keeps_the_rest():
    assert printable("a\nb\r\x1b[31m\x00\x7f\x9b\u2028é ✓") == "a\\x0ab\\x0d\\x1b[31m\\x00\\x7f\\x9b\\u2028é ✓"


def test_the_plain_formatter_writes_one_line_whatever_the_arguments():
    line = PlainFormatter().format(_record("didcomm type=%s code=%s", FORGED, "SUCCESS"))
    assert "\n" not in line and not any(c in line for c in CONTROLS)
    assert line.endswith("didcomm type=" + printable(FORGED) + " code=SUCCESS")


def test_the_json_formatter_escapes_the_message_and_the_structured_fields():
    line = JsonFormatter().format(_record("didcomm type=%s", FORGED, command=FORGED, status=202))
    assert "\n" not in line and not any(c in line for c in CONTROLS)
    out = json.loads(line)
    assert (out["msg"], out["command"], out["status"]) == ("didcomm type=" + printable(FORGED), printable(FORGED), 202)


def test_a_traceback_keeps_its_lines_but_not_its_other_control_characters():
    try:
        raise ValueError("bad\r\x1b[2Jvalue")
    except ValueError:
        record = logging.LogRecord("x", logging.ERROR, __file__, 1, "failed", (), __import__("sys").exc_info())
    text = PlainFormatter().format(record)
    assert "ValueError: bad\\x0d\\x1b[2Jvalue" in text and "\r" not in text and "\x1b" not in text


def test_the_deployment_logs_through_the_escaping_formatters():
    handlers = [h for h in logging.getLogger().handlers if h.name == "console"]
    assert handlers and all(isinstance(h.formatter, (PlainFormatter, JsonFormatter)) for h in handlers)


@pytest.mark.django_db(transaction=True)
@override_settings(USAGE_METERING_MODE="sync")
def test_an_anoncrypt_type_with_control_characters_forges_no_log_line_and_no_meter(didcomm_a, wallet, caplog):
    message = wallet.message(FORGED_TYPE)
    message.pop("from")
    with caplog.at_level(logging.INFO, logger="mediator.didcomm"):
        resp = didcomm_a.post(wallet.pack(message, didcomm_a.mediator_did, anon=True))
    assert resp.status_code < 500
    records = [r for r in caplog.records if r.getMessage().startswith("didcomm tenant=")]
    assert len(records) == 1 and "\n" in records[0].getMessage()  # the type reached the log call as sent
    console = next(h for h in logging.getLogger().handlers if h.name == "console")
    line = console.format(records[0])
    assert "\n" not in line and not any(c in line for c in CONTROLS)
    assert "type=x/1.0/y\\x0aWARNING mediator.ops ADMIN login ok\\x0d\\x1b[2J\\x00 code=" in line

    metering.flush()
    stored = CommandMeter.objects.filter(channel=CHANNEL).values_list("command_type", flat=True)
    assert len(stored) == 1
    assert not any(c in stored[0] for c in CONTROLS) and "\\x0a" in stored[0]
