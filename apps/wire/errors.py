"""Error codes of DCTRL-0004 §11 and our extensions (docs/protocol-readings.md §7), with HTTP statuses."""

from __future__ import annotations

from enum import Enum
from typing import Any


class ErrorCode(str, Enum):
    INVALID_COMMAND = "INVALID_COMMAND"
    INVALID_SIGNATURE = "INVALID_SIGNATURE"
    INVALID_SIGNATURES = "INVALID_SIGNATURES"
    UNAUTHORIZED_COMMAND = "UNAUTHORIZED_COMMAND"
    TIMESTAMP_OUT_OF_RANGE = "TIMESTAMP_OUT_OF_RANGE"
    DUPLICATE_NONCE = "DUPLICATE_NONCE"
    SENDER_NOT_FOUND = "SENDER_NOT_FOUND"
    SENDER_SIGNING_KEY_NOT_FOUND = "SENDER_SIGNING_KEY_NOT_FOUND"
    RECIPIENT_NOT_FOUND = "RECIPIENT_NOT_FOUND"
    RECIPIENT_NOT_REGISTERED = "RECIPIENT_NOT_REGISTERED"
    COMMUNICATION_CONTRACT_NOT_FOUND = "COMMUNICATION_CONTRACT_NOT_FOUND"
    # Extensions (docs/protocol-readings.md §7)
    PAYLOAD_TOO_LARGE = "PAYLOAD_TOO_LARGE"
    RATE_LIMITED = "RATE_LIMITED"
    RECIPIENT_QUEUE_FULL = "RECIPIENT_QUEUE_FULL"
    MEDIATOR_UNAVAILABLE = "MEDIATOR_UNAVAILABLE"
    UNKNOWN_MEDIATOR = "UNKNOWN_MEDIATOR"

    @property
    def http_status(self) -> int:
        return HTTP_STATUS[self]


HTTP_STATUS: dict[ErrorCode, int] = {
    ErrorCode.INVALID_COMMAND: 400,
    ErrorCode.INVALID_SIGNATURE: 401,
    ErrorCode.INVALID_SIGNATURES: 401,
    ErrorCode.UNAUTHORIZED_COMMAND: 401,
    ErrorCode.TIMESTAMP_OUT_OF_RANGE: 401,
    ErrorCode.DUPLICATE_NONCE: 401,
    ErrorCode.SENDER_NOT_FOUND: 404,
    ErrorCode.SENDER_SIGNING_KEY_NOT_FOUND: 404,
    ErrorCode.RECIPIENT_NOT_FOUND: 404,
    ErrorCode.RECIPIENT_NOT_REGISTERED: 404,
    ErrorCode.COMMUNICATION_CONTRACT_NOT_FOUND: 404,
    ErrorCode.PAYLOAD_TOO_LARGE: 413,
    ErrorCode.RATE_LIMITED: 429,
    ErrorCode.RECIPIENT_QUEUE_FULL: 507,
    ErrorCode.MEDIATOR_UNAVAILABLE: 503,
    ErrorCode.UNKNOWN_MEDIATOR: 404,
}

# WebSocket AUTHENTICATE failures (DCTRL-0004 §10.3; 4008 is our extension, docs/protocol-readings.md §6)
WS_CLOSE_CODES: dict[str, int] = {
    "AUTH_TIMEOUT": 4001,
    "INVALID_MESSAGE": 4002,
    "TIMESTAMP_OUT_OF_RANGE": 4003,
    "DID_NOT_FOUND": 4004,
    "SIGNING_KEY_NOT_FOUND": 4005,
    "INVALID_SIGNATURE": 4006,
    "NOT_REGISTERED": 4007,
    "DUPLICATE_NONCE": 4008,
}


class ProtocolError(Exception):
    """A command failed with a protocol error code; becomes {"type":"ERROR","code":...}."""

    def __init__(self, code: ErrorCode, detail: str = "", retry_after: int | None = None):
        super().__init__(f"{code.value}: {detail}" if detail else code.value)
        self.code = code
        self.detail = detail
        # A 429 always says when to come back (clients such as the Identus SDK give up without it).
        self.retry_after = 1 if retry_after is None and code is ErrorCode.RATE_LIMITED else retry_after

    @property
    def status(self) -> int:
        return self.code.http_status

    def body(self) -> dict[str, Any]:
        return error_body(self.code)


def error_body(code: ErrorCode) -> dict[str, Any]:
    """The exact error shape of DCTRL-0004 §11.1."""
    return {"type": "ERROR", "code": code.value}
