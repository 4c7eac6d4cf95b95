"""Public channels (DCTRL-0007): the event-level signature, and a client that publishes, deletes
and reads public events, verifying every event it reads against its publisher's DID.

Pure Python (no Django). The mediator uses `public_event_signature_ok` for its own check, so the
server and every reader verify exactly the same bytes.
"""

from __future__ import annotations

import json
import time
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any
from urllib.parse import quote

from .crypto import Ed25519KeyPair, sign_json_object, verify_json_object
from .did import DidError, ResolvedDid, parse_decentrl
from .envelope import ONE_WAY_PUBLIC

if TYPE_CHECKING:  # client.py imports this module; no runtime cycle
    from .client import Identity, MediatorClient

PUBLISH = "PUBLISH_PUBLIC_EVENT"
DELETE = "DELETE_PUBLIC_EVENT"
# DCTRL-0007 §8: the signed object. `signature` is over canonical JSON of exactly these four.
SIGNED_FIELDS = ("channel_id", "event", "tags", "timestamp")


def public_event_signable(event: Mapping[str, Any]) -> dict[str, Any]:
    """The signed part of a public event: {channel_id, event, tags, timestamp}."""
    return {k: event[k] for k in SIGNED_FIELDS}


def public_event_signature_ok(event: Mapping[str, Any], signing_public: bytes) -> bool:
    """True when `event["signature"]` signs the canonical {channel_id, event, tags, timestamp}."""
    try:
        signable = public_event_signable(event)
    except (KeyError, TypeError):
        return False
    return verify_json_object(signable, event.get("signature"), signing_public)


def sign_public_event(
    signing: Ed25519KeyPair,
    *,
    channel_id: str,
    event: str | Mapping[str, Any],
    tags: Iterable[str] = (),
    timestamp: int | None = None,
) -> dict[str, Any]:
    """A complete `public_event` object. A non-string `event` is serialised as compact JSON."""
    body = {
        "channel_id": channel_id,
        "event": event if isinstance(event, str) else json.dumps(event, separators=(",", ":"), ensure_ascii=False),
        "tags": list(tags),
        "timestamp": int(time.time()) if timestamp is None else timestamp,
    }
    return {**body, "signature": sign_json_object(body, signing)}


class PublicEventInvalid(ValueError):
    """An event read from a mediator does not verify against its publisher's DID."""

    def __init__(self, event_id: object, reason: str):
        super().__init__(f"public event {event_id!r}: {reason}")
        self.event_id = event_id
        self.reason = reason


def check_public_event(
    item: Mapping[str, Any], publisher_did: str, resolve: Callable[[str], ResolvedDid] = parse_decentrl
) -> None:
    """Raise PublicEventInvalid unless `item` was published, unaltered, by `publisher_did`."""
    event_id = item.get("id") if isinstance(item, Mapping) else None
    if not isinstance(item, Mapping) or item.get("publisher_did") != publisher_did:
        raise PublicEventInvalid(event_id, "publisher_did does not match the feed")
    try:
        publisher = resolve(publisher_did)
    except (DidError, ValueError) as exc:
        raise PublicEventInvalid(event_id, "publisher DID does not resolve") from exc
    if not public_event_signature_ok(item, publisher.signing_key):
        raise PublicEventInvalid(event_id, "signature does not verify")


@dataclass
class PublicPage:
    """One page of `GET /public/<did>`; `verified[i]` says whether `events[i]` verified."""

    events: list[dict[str, Any]]
    page: int
    page_size: int
    total: int
    etag: str | None = None
    verified: list[bool] = field(default_factory=list)

    @property
    def has_more(self) -> bool:
        """DCTRL-0004 §9.2."""
        return (self.page + 1) * self.page_size < self.total


class PublicReadError(Exception):
    """`GET /public/<did>` answered with something other than a SUCCESS page."""

    def __init__(self, status: int, body: Any):
        super().__init__(f"{status} {body.get('code') if isinstance(body, dict) else body!r}")
        self.status = status
        self.body = body
        self.code = body.get("code") if isinstance(body, dict) else None


def public_path(did: str) -> str:
    """`/public/<did>` with the DID percent-encoded (`:` → `%3A`)."""
    return "/public/" + quote(did, safe="")


def publish(
    client: MediatorClient,
    who: Identity,
    *,
    channel_id: str,
    event: str | Mapping[str, Any],
    tags: Iterable[str] = (),
    timestamp: int | None = None,
) -> str:
    """Sign and publish an event on `who`'s mediator; returns the public_event_id."""
    public_event = sign_public_event(who.signing, channel_id=channel_id, event=event, tags=tags, timestamp=timestamp)
    env = who.sign_command(
        recipient_did=client.did, payload={"type": PUBLISH, "public_event": public_event}, channel=ONE_WAY_PUBLIC
    )
    return str(client.send(env)["payload"]["public_event_id"])


def delete(client: MediatorClient, who: Identity, public_event_id: str) -> dict[str, Any]:
    """Delete one of `who`'s public events (others' ids are a silent no-op on our mediator)."""
    env = who.sign_command(
        recipient_did=client.did, payload={"type": DELETE, "public_event_id": public_event_id}, channel=ONE_WAY_PUBLIC
    )
    return client.send(env)


def read(
    client: MediatorClient,
    did: str,
    *,
    channel_id: str | None = None,
    page: int = 0,
    page_size: int = 10,
    on_invalid: str = "raise",
    if_none_match: str | None = None,
) -> PublicPage | None:
    """`GET /public/<did>` and verify every event: `on_invalid="raise"` raises PublicEventInvalid
    on the first bad one, `"flag"` returns them with `verified[i] = False`. Returns None on a 304."""
    if on_invalid not in ("raise", "flag"):
        raise ValueError("on_invalid must be 'raise' or 'flag'")
    params: dict[str, Any] = {"page": page, "page_size": page_size}
    if channel_id is not None:
        params["channel_id"] = channel_id
    headers = {"If-None-Match": if_none_match} if if_none_match else {}
    r = client.http.get(client.base_url + public_path(did), params=params, headers=headers)
    if r.status_code == 304:
        return None
    try:
        body = r.json()
    except ValueError:
        body = r.text
    if r.status_code != 200 or not isinstance(body, dict) or body.get("type") != "SUCCESS":
        raise PublicReadError(r.status_code, body)
    payload = body["payload"]
    events = payload["public_events"]
    verified = []
    for item in events:
        try:
            check_public_event(item, did)
            verified.append(True)
        except PublicEventInvalid:
            if on_invalid == "raise":
                raise
            verified.append(False)
    pg = payload["pagination"]
    return PublicPage(events, pg["page"], pg["page_size"], pg["total"], r.headers.get("ETag"), verified)
