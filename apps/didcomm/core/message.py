"""DIDComm v2 plaintext messages (`application/didcomm-plain+json`) and telling the three forms apart."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any, TypeVar

from apps.wire.canonical import loads_strict

from .errors import MalformedEnvelope, MalformedMessage

TYP_PLAIN = "application/didcomm-plain+json"
ENCRYPTED, SIGNED, PLAINTEXT = "encrypted", "signed", "plaintext"


def envelope_kind(obj: Mapping[str, Any]) -> str:
    """`encrypted` (a JWE), `signed` (a JWS) or `plaintext`, by the members present."""
    if "ciphertext" in obj or "recipients" in obj:
        return ENCRYPTED
    if "signatures" in obj or "payload" in obj:
        return SIGNED
    return PLAINTEXT


def parse_json_object(data: bytes | str) -> dict[str, Any]:
    """A JSON object from bytes; MalformedEnvelope otherwise."""
    try:
        value = loads_strict(data)
    except (ValueError, UnicodeDecodeError) as exc:
        raise MalformedEnvelope("not JSON") from exc
    if not isinstance(value, dict):
        raise MalformedEnvelope("not a JSON object")
    return value


@dataclass(frozen=True)
class PlainMessage:
    id: str
    type: str
    body: dict[str, Any]
    from_: str | None = None
    to: tuple[str, ...] = ()
    thid: str | None = None
    pthid: str | None = None
    created_time: int | None = None
    expires_time: int | None = None
    attachments: tuple[dict[str, Any], ...] = ()
    raw: dict[str, Any] = field(default_factory=dict[str, Any], compare=False)

    @property
    def return_route(self) -> str | None:
        """The `return_route` header (`all`, `none`, `thread`), if any."""
        value = self.raw.get("return_route")
        return value if isinstance(value, str) else None


_T = TypeVar("_T")


def _opt(obj: Mapping[str, Any], name: str, kind: type[_T]) -> _T | None:
    value = obj.get(name)
    if value is not None and (not isinstance(value, kind) or isinstance(value, bool)):
        raise MalformedMessage(f"{name} has the wrong type")
    return value


def parse_plaintext(data: bytes | str | Mapping[str, Any]) -> PlainMessage:
    """Validate a plaintext message's headers (DIDComm v2 §"Plaintext Message Structure")."""
    obj = dict(data) if type(data) is dict or isinstance(data, Mapping) else parse_json_object(data)
    if "typ" in obj and obj["typ"] != TYP_PLAIN:
        raise MalformedMessage("typ is not application/didcomm-plain+json")
    msg_id, msg_type, body = obj.get("id"), obj.get("type"), obj.get("body")
    if not isinstance(msg_id, str) or not msg_id:
        raise MalformedMessage("id is required")
    if not isinstance(msg_type, str) or not msg_type:
        raise MalformedMessage("type is required")
    if body is None:
        body = {}
    if not isinstance(body, dict):
        raise MalformedMessage("body must be an object")
    to = obj.get("to")
    if to is not None and (not isinstance(to, list) or not all(isinstance(t, str) for t in to)):
        raise MalformedMessage("to must be a list of DIDs")
    attachments = obj.get("attachments", [])
    if not isinstance(attachments, list) or not all(isinstance(a, dict) for a in attachments):
        raise MalformedMessage("attachments must be a list of objects")
    return PlainMessage(
        id=msg_id,
        type=msg_type,
        body=body,
        from_=_opt(obj, "from", str),
        to=tuple(to or ()),
        thid=_opt(obj, "thid", str),
        pthid=_opt(obj, "pthid", str),
        created_time=_opt(obj, "created_time", int),
        expires_time=_opt(obj, "expires_time", int),
        attachments=tuple(attachments),
        raw=obj,
    )
