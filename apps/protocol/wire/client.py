"""A DCTRL-0004 client: identities, signed commands, registration, the contract handshake,
sending, querying and acknowledging over HTTP. Tests, benchmarks and the CLI all use it."""

from __future__ import annotations

import json
import time
import uuid
from dataclasses import dataclass, field
from typing import Any

import httpx

from . import contract as wc
from .canonical import canonical_bytes
from .crypto import Ed25519KeyPair, X25519KeyPair, aes_gcm_decrypt, aes_gcm_encrypt, encrypt_tag, sign_json_object
from .did import ResolvedDid, decentrl_did, parse_decentrl, parse_mediator_document
from .encoding import b64decode, b64encode
from .envelope import DIRECT_AUTHENTICATED, ONE_WAY_PUBLIC, TWO_WAY_PRIVATE

DAY_S = 86_400


@dataclass
class Identity:
    """A did:decentrl identity with its private keys and the contracts it holds."""

    alias: str
    signing: Ed25519KeyPair
    prekey: X25519KeyPair
    mediator_did: str
    storage_key: bytes = field(default_factory=lambda: X25519KeyPair.generate().private)
    # contract hash -> (signed contract, own ephemeral private key)
    contracts: dict[str, tuple[dict, bytes]] = field(default_factory=dict)

    @classmethod
    def create(cls, alias: str, mediator_did: str) -> Identity:
        """Fresh keys for `alias`, hosted by `mediator_did`."""
        return cls(alias=alias, signing=Ed25519KeyPair.generate(), prekey=X25519KeyPair.generate(), mediator_did=mediator_did)

    @property
    def did(self) -> str:
        return decentrl_did(self.alias, self.signing.public, self.prekey.public, self.mediator_did)

    @property
    def key_id(self) -> str:
        return f"{self.did}#signing"

    def sign_command(
        self, *, recipient_did: str, payload: Any, channel: str = DIRECT_AUTHENTICATED,
        timestamp: int | None = None, nonce: str | None = None,
    ) -> dict:
        """A complete signed command envelope (DCTRL-0004 §4)."""
        header = {
            "channel": channel,
            "sender_did": self.did,
            "sender_signing_key_id": self.key_id,
            "recipient_did": recipient_did,
            "timestamp": int(time.time() * 1000) if timestamp is None else timestamp,
            "nonce": nonce or str(uuid.uuid4()),
        }
        signable = {"header": header, "payload": payload}
        return {**signable, "signature": sign_json_object(signable, self.signing)}

    def ws_authenticate(self, *, timestamp: int | None = None, nonce: str | None = None) -> dict:
        """The WebSocket AUTHENTICATE frame (DCTRL-0004 §10.2)."""
        msg = {
            "did": self.did,
            "signing_key_id": self.key_id,
            "timestamp": int(time.time() * 1000) if timestamp is None else timestamp,
            "nonce": nonce or str(uuid.uuid4()),
        }
        return {"type": "AUTHENTICATE", **msg, "signature": sign_json_object(msg, self.signing)}

    def tag(self, plaintext_tag: str) -> str:
        """An encrypted tag (DCTRL-0002 §11)."""
        return encrypt_tag(plaintext_tag, self.signing)

    def seal_for_storage(self, event: dict) -> str:
        """Storage encryption of an event with the owner's storage key (DCTRL-0005)."""
        return aes_gcm_encrypt(self.storage_key, json.dumps(event, separators=(",", ":")).encode("utf-8"))

    def open_from_storage(self, blob: str) -> dict:
        return json.loads(aes_gcm_decrypt(self.storage_key, blob))

    def contract_with(self, other_did: str) -> tuple[dict, bytes] | None:
        """The newest live contract held with `other_did`, with our ephemeral private key."""
        best = None
        for signed, priv in self.contracts.values():
            t = signed["communication_contract"]
            if other_did in (t["requestor_did"], t["recipient_did"]) and t["expires_at"] > time.time():
                if best is None or t["expires_at"] > best[0]["communication_contract"]["expires_at"]:
                    best = (signed, priv)
        return best

    def remember_contract(self, signed: dict, ephemeral_private: bytes) -> str:
        h = wc.contract_hash(signed["communication_contract"])
        self.contracts[h] = (signed, ephemeral_private)
        return h


class MediatorError(Exception):
    """The mediator answered with a protocol error."""

    def __init__(self, status: int, body: dict):
        super().__init__(f"{status} {body.get('code')}")
        self.status = status
        self.body = body
        self.code = body.get("code")


class MediatorClient:
    """HTTP access to one mediator (by base URL). `raise_errors=False` returns error replies."""

    def __init__(self, base_url: str, *, timeout: float = 10.0, host: str | None = None, http: httpx.Client | None = None):
        self.base_url = base_url.rstrip("/")
        headers = {"Host": host} if host else {}
        self.http = http or httpx.Client(timeout=timeout, headers=headers)
        self._doc: ResolvedDid | None = None

    def close(self) -> None:
        self.http.close()

    # -- raw endpoints --
    def did_document(self) -> dict:
        r = self.http.get(self.base_url + "/")
        r.raise_for_status()
        return r.json()

    @property
    def mediator(self) -> ResolvedDid:
        if self._doc is None:
            self._doc = parse_mediator_document(self.did_document())
        return self._doc

    @property
    def did(self) -> str:
        return self.mediator.did

    def health(self) -> tuple[int, dict]:
        r = self.http.get(self.base_url + "/health")
        return r.status_code, r.json()

    def post_raw(self, body: bytes | str) -> tuple[int, dict]:
        """POST arbitrary bytes; returns (status, parsed reply)."""
        data = body.encode("utf-8") if isinstance(body, str) else body
        r = self.http.post(self.base_url + "/", content=data, headers={"Content-Type": "application/json"})
        return r.status_code, r.json()

    def send(self, envelope: dict, *, raise_errors: bool = True) -> dict:
        status, reply = self.post_raw(canonical_bytes(envelope))
        if raise_errors and (status != 200 or reply.get("type") != "SUCCESS"):
            raise MediatorError(status, reply)
        return reply

    def command(self, who: Identity, payload: dict, *, recipient_did: str | None = None, **kw) -> dict:
        """Sign and send a DIRECT_AUTHENTICATED command (recipient defaults to this mediator)."""
        env = who.sign_command(recipient_did=recipient_did or self.did, payload=payload)
        return self.send(env, **kw)

    # -- flows --
    def register(self, who: Identity, *, lifetime_s: int = 30 * DAY_S) -> dict:
        """Register `who` with this mediator (DCTRL-0003 §9); returns the signed contract."""
        req = wc.build_request(
            requestor_did=who.did,
            recipient_did=self.did,
            recipient_prekey=self.mediator.pre_key,
            signing=who.signing,
            expires_at=int(time.time()) + lifetime_s,
        )
        reply = self.command(
            who,
            {
                "type": "REQUEST_COMMUNICATION_CONTRACT",
                "encrypted_contract_request": req.encrypted,
                "requestor_ephemeral_public_key": req.ephemeral_public_b64,
            },
        )
        signed = reply["payload"]["signed_communication_contract"]
        if not wc.verify_signed_contract(signed, lambda d: self.mediator if d == self.did else parse_decentrl(d), now_s=int(time.time())):
            raise MediatorError(200, {"code": "BAD_REGISTRATION_CONTRACT"})
        who.remember_contract(signed, req.ephemeral.private)
        return signed

    def request_contract(self, who: Identity, recipient_did: str, *, lifetime_s: int = 7 * DAY_S) -> wc.ContractRequest:
        """Send a contract request to `recipient_did` through this (the recipient's) mediator."""
        recipient = parse_decentrl(recipient_did)
        req = wc.build_request(
            requestor_did=who.did,
            recipient_did=recipient_did,
            recipient_prekey=recipient.pre_key,
            signing=who.signing,
            expires_at=int(time.time()) + lifetime_s,
        )
        self.command(
            who,
            {
                "type": "REQUEST_COMMUNICATION_CONTRACT",
                "encrypted_contract_request": req.encrypted,
                "requestor_ephemeral_public_key": req.ephemeral_public_b64,
            },
            recipient_did=recipient_did,
        )
        return req

    def pending_contract_requests(self, who: Identity, page: int = 0, page_size: int = 10) -> dict:
        return self.command(
            who, {"type": "QUERY_PENDING_COMMUNICATION_CONTRACT_REQUESTS", "pagination": {"page": page, "page_size": page_size}}
        )["payload"]

    def accept_contract_request(self, who: Identity, item: dict, requestor_mediator: MediatorClient) -> dict:
        """Decrypt a pending request, countersign, respond to the requestor's mediator, save on ours, ack."""
        request = wc.decrypt_request(item["encrypted_contract_request"], item["requestor_ephemeral_public_key"], who.prekey.private)
        requestor = parse_decentrl(request["communication_contract"]["requestor_did"])
        if not wc.verify_request_signature(request, requestor) or requestor.did != item["sender_did"]:
            raise ValueError("contract request signature does not verify")
        signed, eph = wc.accept_request(request, who.signing)
        requestor_mediator.command(
            who,
            {"type": "COMMUNICATION_CONTRACT_RESPONSE", "signed_communication_contract": signed},
            recipient_did=requestor.did,
        )
        self.command(who, {"type": "SAVE_COMMUNICATION_CONTRACT", "signed_communication_contract": signed})
        self.command(who, {"type": "ACKNOWLEDGE_PENDING_COMMUNICATION_CONTRACT_REQUESTS", "communication_contract_ids": [item["id"]]})
        who.remember_contract(signed, eph.private)
        return signed

    def contracts(self, who: Identity, flt: dict | None = None, page: int = 0, page_size: int = 10) -> dict:
        payload: dict = {"type": "QUERY_COMMUNICATION_CONTRACTS", "pagination": {"page": page, "page_size": page_size}}
        if flt:
            payload["filter"] = flt
        return self.command(who, payload)["payload"]

    def adopt_contract(self, who: Identity, signed: dict, ephemeral_private: bytes) -> None:
        """Requestor side: keep an accepted contract (after CONTRACTS_UPDATED / query)."""
        who.remember_contract(signed, ephemeral_private)

    def send_private(self, who: Identity, recipient_did: str, event: dict) -> str:
        """Encrypt `event` under the contract root secret and send TWO_WAY_PRIVATE; returns pendingEventId."""
        held = who.contract_with(recipient_did)
        if held is None:
            raise ValueError(f"no contract with {recipient_did}")
        signed, priv = held
        terms = signed["communication_contract"]
        theirs = terms["recipient_ephemeral_public_key"] if terms["requestor_did"] == who.did else terms["requestor_ephemeral_public_key"]
        key = wc.root_secret(priv, theirs)
        envelope = {"contract_id": wc.contract_hash(terms), "event": json.dumps(event, separators=(",", ":")), "timestamp": int(time.time() * 1000)}
        envelope["signature"] = sign_json_object(envelope, who.signing)
        blob = aes_gcm_encrypt(key, json.dumps(envelope, separators=(",", ":")).encode("utf-8"))
        env = who.sign_command(recipient_did=recipient_did, payload=blob, channel=TWO_WAY_PRIVATE)
        return self.send(env)["pendingEventId"]

    def decrypt_private(self, who: Identity, sender_did: str, blob: str) -> dict:
        """Open a transit event from `sender_did` with any held contract's root secret."""
        for signed, priv in who.contracts.values():
            t = signed["communication_contract"]
            if sender_did not in (t["requestor_did"], t["recipient_did"]):
                continue
            theirs = t["recipient_ephemeral_public_key"] if t["requestor_did"] == who.did else t["requestor_ephemeral_public_key"]
            try:
                envelope = json.loads(aes_gcm_decrypt(wc.root_secret(priv, theirs), blob))
            except Exception:  # noqa: BLE001 - try the next contract
                continue
            return {"contract_id": envelope["contract_id"], "event": json.loads(envelope["event"]), "timestamp": envelope["timestamp"]}
        raise ValueError("no contract opens this event")

    def pending_events(self, who: Identity, sender_did: str | None = None, page: int = 0, page_size: int = 10) -> dict:
        payload: dict = {"type": "QUERY_PENDING_EVENTS", "pagination": {"page": page, "page_size": page_size}}
        if sender_did:
            payload["filter"] = {"sender_did": sender_did}
        return self.command(who, payload)["payload"]

    def ack_events(self, who: Identity, ids: list[str]) -> dict:
        return self.command(who, {"type": "ACKNOWLEDGE_PENDING_EVENTS", "event_ids": ids})

    def save_events(self, who: Identity, events: list[dict]) -> dict:
        return self.command(who, {"type": "SAVE_EVENTS", "events": events})

    def query_events(self, who: Identity, flt: dict | None = None, page: int = 0, page_size: int = 10) -> dict:
        payload: dict = {"type": "QUERY_EVENTS", "pagination": {"page": page, "page_size": page_size}}
        if flt:
            payload["filter"] = flt
        return self.command(who, payload)["payload"]

    def update_event_tags(self, who: Identity, updates: list[dict]) -> dict:
        return self.command(who, {"type": "UPDATE_EVENT_TAGS", "events": updates})

    def stored_event(self, who: Identity, *, sender_did: str, recipient_did: str, event: dict, tags: list[str],
                     timestamp: int | None = None, contract_id: str | None = None) -> dict:
        """Build a SAVE_EVENTS item: storage-encrypted payload and encrypted tags."""
        item = {
            "sender_did": sender_did,
            "recipient_did": recipient_did,
            "timestamp": int(time.time()) if timestamp is None else timestamp,
            "payload": who.seal_for_storage(event),
            "encrypted_tags": [who.tag(t) for t in tags],
        }
        if contract_id:
            item["contract_id"] = contract_id
        return item


__all__ = ["Identity", "MediatorClient", "MediatorError", "ONE_WAY_PUBLIC", "b64decode", "b64encode"]
