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
from . import public as wire_public
from .canonical import CanonicalError, canonical_bytes
from .crypto import (
    CryptoFailure,
    Ed25519KeyPair,
    X25519KeyPair,
    aes_gcm_decrypt,
    aes_gcm_encrypt,
    encrypt_tag,
    sign_json_object,
    verify_json_object,
)
from .did import (
    DidError,
    ResolvedDid,
    decentrl_did,
    host_for_web_did,
    mediator_did_of,
    parse_decentrl,
    parse_mediator_document,
)
from .encoding import EncodingError, b64decode, b64encode
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
    contracts: dict[str, tuple[dict[str, Any], bytes]] = field(default_factory=dict)
    # requests sent and not yet picked up: our ephemeral public key (b64) -> its private half
    requested: dict[str, bytes] = field(default_factory=dict)

    @classmethod
    def create(cls, alias: str, mediator_did: str) -> Identity:
        """Fresh keys for `alias`, hosted by `mediator_did`."""
        return cls(
            alias=alias, signing=Ed25519KeyPair.generate(), prekey=X25519KeyPair.generate(), mediator_did=mediator_did
        )

    @property
    def did(self) -> str:
        return decentrl_did(self.alias, self.signing.public, self.prekey.public, self.mediator_did)

    @property
    def key_id(self) -> str:
        return f"{self.did}#signing"

    def sign_command(
        self,
        *,
        recipient_did: str,
        payload: Any,
        channel: str = DIRECT_AUTHENTICATED,
        timestamp: int | None = None,
        nonce: str | None = None,
    ) -> dict[str, Any]:
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

    def ws_authenticate(self, *, timestamp: int | None = None, nonce: str | None = None) -> dict[str, Any]:
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

    def seal_for_storage(self, event: dict[str, Any]) -> str:
        """Storage encryption of an event with the owner's storage key (DCTRL-0005)."""
        return aes_gcm_encrypt(self.storage_key, json.dumps(event, separators=(",", ":")).encode("utf-8"))

    def open_from_storage(self, blob: str) -> dict[str, Any]:
        data: dict[str, Any] = json.loads(aes_gcm_decrypt(self.storage_key, blob))
        return data

    def contract_with(self, other_did: str) -> tuple[dict[str, Any], bytes] | None:
        """The newest live contract held with `other_did`, with our ephemeral private key."""
        best = None
        for signed, priv in self.contracts.values():
            t = signed["communication_contract"]
            if other_did in (t["requestor_did"], t["recipient_did"]) and t["expires_at"] > time.time():
                if best is None or t["expires_at"] > best[0]["communication_contract"]["expires_at"]:
                    best = (signed, priv)
        return best

    def remember_contract(self, signed: dict[str, Any], ephemeral_private: bytes) -> str:
        h = wc.contract_hash(signed["communication_contract"])
        self.contracts[h] = (signed, ephemeral_private)
        return h

    def to_json(self) -> dict[str, Any]:
        """Everything needed to restore this identity, private keys included (keep it secret)."""
        return {
            "version": 1,
            "alias": self.alias,
            "did": self.did,
            "mediator_did": self.mediator_did,
            "signing_seed": b64encode(self.signing.seed),
            "prekey_private": b64encode(self.prekey.private),
            "storage_key": b64encode(self.storage_key),
            "contracts": [
                {"signed_communication_contract": signed, "ephemeral_private": b64encode(priv)}
                for signed, priv in self.contracts.values()
            ],
            "requested": [
                {"ephemeral_public": pub, "ephemeral_private": b64encode(priv)} for pub, priv in self.requested.items()
            ],
        }

    @classmethod
    def from_json(cls, data: Any) -> Identity:
        """Inverse of to_json; ValueError when the data is malformed or its DID does not match its keys.
        Members it does not know are ignored (the CLI keeps its own next to these)."""

        def key32(value: Any) -> bytes:
            raw = b64decode(value) if isinstance(value, str) else b""
            if len(raw) != 32:
                raise ValueError("identity keys are 32 bytes of base64")
            return raw

        try:
            if not isinstance(data, dict) or data.get("version") != 1:
                raise ValueError("not a version 1 identity")
            alias, mediator_did = data["alias"], data["mediator_did"]
            if not isinstance(alias, str) or not isinstance(mediator_did, str):
                raise ValueError("alias and mediator_did must be strings")
            ident = cls(
                alias=alias,
                signing=Ed25519KeyPair.from_seed(key32(data["signing_seed"])),
                prekey=X25519KeyPair.from_private(key32(data["prekey_private"])),
                mediator_did=mediator_did,
                storage_key=key32(data["storage_key"]),
            )
            for item in data.get("contracts", []):
                ident.remember_contract(item["signed_communication_contract"], key32(item["ephemeral_private"]))
            for item in data.get("requested", []):
                ident.requested[item["ephemeral_public"]] = key32(item["ephemeral_private"])
        except (KeyError, TypeError, AttributeError, EncodingError, CanonicalError) as exc:
            raise ValueError(f"malformed identity: {exc}") from exc
        if data.get("did", ident.did) != ident.did:
            raise ValueError("identity DID does not match its keys")
        return ident


def agree_contract(
    requestor: Identity, recipient: Identity, *, lifetime_s: int = DAY_S
) -> tuple[dict[str, Any], bytes, bytes]:
    """A contract requested by `requestor` and accepted by `recipient`, both held here (tests, load
    generators): both remember it. Returns (signed, requestor's ephemeral private key, recipient's)."""
    req = wc.build_request(
        requestor_did=requestor.did,
        recipient_did=recipient.did,
        recipient_prekey=parse_decentrl(recipient.did).pre_key,
        signing=requestor.signing,
        expires_at=int(time.time()) + lifetime_s,
    )
    signed, eph = wc.accept_request(req.request, recipient.signing)
    requestor.remember_contract(signed, req.ephemeral.private)
    recipient.remember_contract(signed, eph.private)
    return signed, req.ephemeral.private, eph.private


class MediatorError(Exception):
    """The mediator answered with a protocol error."""

    def __init__(self, status: int, body: dict[str, Any]):
        super().__init__(f"{status} {body.get('code')}")
        self.status = status
        self.body = body
        self.code = body.get("code")


class MediatorClient:
    """HTTP access to one mediator (by base URL). `raise_errors=False` returns error replies."""

    def __init__(
        self,
        base_url: str,
        *,
        timeout: float = 10.0,
        host: str | None = None,
        http: httpx.Client | None = None,
        directory: MediatorDirectory | None = None,
    ):
        self.base_url = base_url.rstrip("/")
        headers = {"Host": host} if host else {}
        self.http = http or httpx.Client(timeout=timeout, headers=headers)
        self._doc: ResolvedDid | None = None
        # Where the other party's mediator is found (cross-mediator flows); None = this one only.
        self.directory = directory
        # (status, body) of the last command sent: flows that return something else keep it reachable.
        self.last_reply: tuple[int, dict[str, Any]] | None = None
        if directory is not None:
            directory.add(self)

    def close(self) -> None:
        self.http.close()

    # -- raw endpoints --
    def did_document(self) -> dict[str, Any]:
        r = self.http.get(self.base_url + "/")
        r.raise_for_status()
        document: dict[str, Any] = r.json()
        return document

    @property
    def mediator(self) -> ResolvedDid:
        if self._doc is None:
            self._doc = parse_mediator_document(self.did_document())
        return self._doc

    @property
    def did(self) -> str:
        return self.mediator.did

    def health(self) -> tuple[int, dict[str, Any]]:
        r = self.http.get(self.base_url + "/health")
        return r.status_code, r.json()

    def post_raw(self, body: bytes | str) -> tuple[int, dict[str, Any]]:
        """POST arbitrary bytes; returns (status, parsed reply)."""
        data = body.encode("utf-8") if isinstance(body, str) else body
        r = self.http.post(self.base_url + "/", content=data, headers={"Content-Type": "application/json"})
        return r.status_code, r.json()

    def send(self, envelope: dict[str, Any], *, raise_errors: bool = True) -> dict[str, Any]:
        status, reply = self.post_raw(canonical_bytes(envelope))
        self.last_reply = (status, reply)
        if raise_errors and (status != 200 or reply.get("type") != "SUCCESS"):
            raise MediatorError(status, reply)
        return reply

    def command(
        self, who: Identity, payload: dict[str, Any], *, recipient_did: str | None = None, **kw: Any
    ) -> dict[str, Any]:
        """Sign and send a DIRECT_AUTHENTICATED command (recipient defaults to this mediator)."""
        env = who.sign_command(recipient_did=recipient_did or self.did, payload=payload)
        return self.send(env, **kw)

    def command_payload(self, who: Identity, payload: dict[str, Any]) -> dict[str, Any]:
        """Send a command that must succeed and return its reply's payload."""
        reply: dict[str, Any] = self.command(who, payload)["payload"]
        return reply

    # -- flows --
    def register(self, who: Identity, *, lifetime_s: int = 30 * DAY_S) -> dict[str, Any]:
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
        signed: dict[str, Any] = reply["payload"]["signed_communication_contract"]
        if not wc.verify_signed_contract(
            signed, lambda d: self.mediator if d == self.did else parse_decentrl(d), now_s=int(time.time())
        ):
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
        who.requested[req.ephemeral_public_b64] = req.ephemeral.private
        return req

    def mediator_for(self, did: str) -> MediatorClient:
        """The mediator hosting `did` (its DID's mediator segment): this one or one from the directory."""
        mediator_did = mediator_did_of(did)
        if mediator_did == self.did:
            return self
        if self.directory is None:
            raise DidError(f"no directory to reach mediator {mediator_did}")
        return self.directory.client_for(mediator_did)

    def pending_contract_requests(self, who: Identity, page: int = 0, page_size: int = 10) -> dict[str, Any]:
        return self.command_payload(
            who,
            {
                "type": "QUERY_PENDING_COMMUNICATION_CONTRACT_REQUESTS",
                "pagination": {"page": page, "page_size": page_size},
            },
        )

    def open_contract_request(self, who: Identity, item: dict[str, Any]) -> dict[str, Any]:
        """Decrypt a pending contract request addressed to `who` and check it came from its sender."""
        request = wc.decrypt_request(
            item["encrypted_contract_request"], item["requestor_ephemeral_public_key"], who.prekey.private
        )
        terms = request["communication_contract"]
        requestor = parse_decentrl(terms["requestor_did"])
        if not wc.verify_request_signature(request, requestor) or requestor.did != item["sender_did"]:
            raise ValueError("contract request signature does not verify")
        if (
            terms.get("recipient_did") != who.did
            or terms.get("requestor_ephemeral_public_key") != item["requestor_ephemeral_public_key"]
        ):
            raise ValueError("contract request is not addressed to this identity")
        return request

    def accept_contract_request(
        self, who: Identity, item: dict[str, Any], requestor_mediator: MediatorClient | None = None
    ) -> dict[str, Any]:
        """Decrypt a pending request, countersign, respond to the requestor's mediator, save on ours, ack.

        The requestor's mediator defaults to the one named in the requestor's DID (via the directory).
        """
        request = self.open_contract_request(who, item)
        requestor = parse_decentrl(request["communication_contract"]["requestor_did"])
        if requestor_mediator is None:
            requestor_mediator = self.mediator_for(requestor.did)
        signed, eph = wc.accept_request(request, who.signing)
        requestor_mediator.command(
            who,
            {"type": "COMMUNICATION_CONTRACT_RESPONSE", "signed_communication_contract": signed},
            recipient_did=requestor.did,
        )
        self.command(who, {"type": "SAVE_COMMUNICATION_CONTRACT", "signed_communication_contract": signed})
        self.command(
            who,
            {"type": "ACKNOWLEDGE_PENDING_COMMUNICATION_CONTRACT_REQUESTS", "communication_contract_ids": [item["id"]]},
        )
        who.remember_contract(signed, eph.private)
        return signed

    def contracts(
        self, who: Identity, flt: dict[str, Any] | None = None, page: int = 0, page_size: int = 10
    ) -> dict[str, Any]:
        payload: dict[str, Any] = {
            "type": "QUERY_COMMUNICATION_CONTRACTS",
            "pagination": {"page": page, "page_size": page_size},
        }
        if flt:
            payload["filter"] = flt
        return self.command_payload(who, payload)

    def pick_up_contracts(self, who: Identity, *, with_did: str | None = None) -> list[dict[str, Any]]:
        """Requestor side: QUERY_COMMUNICATION_CONTRACTS on this (our own) mediator and adopt every
        accepted contract answering one of our outstanding requests; returns the adopted ones.

        Each is verified locally (both signatures) before it is trusted."""
        adopted: list[dict[str, Any]] = []
        page = 0
        while who.requested:
            reply = self.contracts(who, {"did": with_did} if with_did else None, page=page, page_size=100)
            for item in reply["communication_contracts"]:
                signed = item["signed_communication_contract"]
                terms = signed.get("communication_contract") or {}
                priv = who.requested.get(terms.get("requestor_ephemeral_public_key", ""))
                if priv is None or terms.get("requestor_did") != who.did:
                    continue
                try:
                    wc.verify_signed_contract(signed, parse_decentrl, now_s=int(time.time()))
                except (wc.ContractInvalid, wc.ContractSignaturesInvalid):
                    continue  # not a contract we can trust; keep waiting for a good one
                who.remember_contract(signed, priv)
                del who.requested[terms["requestor_ephemeral_public_key"]]
                adopted.append(signed)
            if (page + 1) * 100 >= reply["pagination"]["total"]:
                break
            page += 1
        return adopted

    def seal_private(
        self, who: Identity, recipient_did: str, event: dict[str, Any], *, timestamp: int | None = None
    ) -> str:
        """The TWO_WAY_PRIVATE payload: the signed envelope {contract_id, event, timestamp, signature}
        encrypted under the newest live contract's root secret (DCTRL-0005 transit encryption)."""
        held = who.contract_with(recipient_did)
        if held is None:
            raise ValueError(f"no contract with {recipient_did}")
        signed, priv = held
        terms = signed["communication_contract"]
        theirs = (
            terms["recipient_ephemeral_public_key"]
            if terms["requestor_did"] == who.did
            else terms["requestor_ephemeral_public_key"]
        )
        key = wc.root_secret(priv, theirs)
        envelope = {
            "contract_id": wc.contract_hash(terms),
            "event": json.dumps(event, separators=(",", ":")),
            "timestamp": int(time.time() * 1000) if timestamp is None else timestamp,
        }
        envelope["signature"] = sign_json_object(envelope, who.signing)
        return aes_gcm_encrypt(key, json.dumps(envelope, separators=(",", ":")).encode("utf-8"))

    def send_sealed(self, who: Identity, recipient_did: str, blob: str) -> str:
        """Send an already sealed payload as TWO_WAY_PRIVATE to this (the recipient's) mediator."""
        env = who.sign_command(recipient_did=recipient_did, payload=blob, channel=TWO_WAY_PRIVATE)
        return str(self.send(env)["pendingEventId"])

    def send_private(self, who: Identity, recipient_did: str, event: dict[str, Any]) -> str:
        """Encrypt `event` under the contract root secret and send TWO_WAY_PRIVATE; returns pendingEventId."""
        return self.send_sealed(who, recipient_did, self.seal_private(who, recipient_did, event))

    def decrypt_private(self, who: Identity, sender_did: str, blob: str) -> dict[str, Any]:
        """Open a transit event from `sender_did` with any held contract's root secret, and verify
        the envelope signature with the sender's signing key (DCTRL-0005 receive loop step 3)."""
        sender_key = parse_decentrl(sender_did).signing_key
        for signed, priv in who.contracts.values():
            t = signed["communication_contract"]
            if sender_did not in (t["requestor_did"], t["recipient_did"]):
                continue
            theirs = (
                t["recipient_ephemeral_public_key"]
                if t["requestor_did"] == who.did
                else t["requestor_ephemeral_public_key"]
            )
            try:
                envelope = json.loads(aes_gcm_decrypt(wc.root_secret(priv, theirs), blob))
            except (CryptoFailure, ValueError):  # another contract's key: try the next one
                continue
            if not isinstance(envelope, dict):
                continue
            signature = envelope.pop("signature", None)
            if not verify_json_object(envelope, signature, sender_key):
                raise ValueError("event envelope signature does not verify")
            if envelope.get("contract_id") != wc.contract_hash(t):
                raise ValueError("event envelope names another contract")
            return {
                "contract_id": envelope["contract_id"],
                "event": json.loads(envelope["event"]),
                "timestamp": envelope["timestamp"],
            }
        raise ValueError("no contract opens this event")

    def pending_events(
        self, who: Identity, sender_did: str | None = None, page: int = 0, page_size: int = 10
    ) -> dict[str, Any]:
        payload: dict[str, Any] = {"type": "QUERY_PENDING_EVENTS", "pagination": {"page": page, "page_size": page_size}}
        if sender_did:
            payload["filter"] = {"sender_did": sender_did}
        return self.command_payload(who, payload)

    def ack_events(self, who: Identity, ids: list[str]) -> dict[str, Any]:
        return self.command(who, {"type": "ACKNOWLEDGE_PENDING_EVENTS", "event_ids": ids})

    def save_events(self, who: Identity, events: list[dict[str, Any]]) -> dict[str, Any]:
        return self.command(who, {"type": "SAVE_EVENTS", "events": events})

    def query_events(
        self, who: Identity, flt: dict[str, Any] | None = None, page: int = 0, page_size: int = 10
    ) -> dict[str, Any]:
        payload: dict[str, Any] = {"type": "QUERY_EVENTS", "pagination": {"page": page, "page_size": page_size}}
        if flt:
            payload["filter"] = flt
        return self.command_payload(who, payload)

    def update_event_tags(self, who: Identity, updates: list[dict[str, Any]]) -> dict[str, Any]:
        return self.command(who, {"type": "UPDATE_EVENT_TAGS", "events": updates})

    def stored_event(
        self,
        who: Identity,
        *,
        sender_did: str,
        recipient_did: str,
        event: dict[str, Any],
        tags: list[str],
        timestamp: int | None = None,
        contract_id: str | None = None,
    ) -> dict[str, Any]:
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

    # -- push devices (our extension, outside DCTRL-0004: docs/push.md, "Registration") --
    def push_device_set(self, who: Identity, service: str, token: str, platform: str | None = None) -> dict[str, Any]:
        """Register `who`'s device on `service` (fcm, apns; webpush: the PushSubscription's JSON as `token`)."""
        payload: dict[str, Any] = {"type": "PUSH_DEVICE_SET", "service": service, "token": token}
        if platform is not None:
            payload["platform"] = platform
        return self.command(who, payload)

    def push_device(self, who: Identity, service: str) -> dict[str, Any] | None:
        """`who`'s device on `service` ({service, token, platform}), or None."""
        device: dict[str, Any] | None = self.command_payload(who, {"type": "PUSH_DEVICE_GET", "service": service})[
            "device"
        ]
        return device

    def push_device_remove(self, who: Identity, service: str) -> bool:
        """Forget `who`'s device on `service`; whether there was one."""
        return bool(self.command_payload(who, {"type": "PUSH_DEVICE_REMOVE", "service": service})["removed"])

    # -- public channels (DCTRL-0007; the logic lives in wire/public.py) --
    def publish_public(
        self,
        who: Identity,
        channel_id: str,
        event: str | dict[str, Any],
        tags: list[str] | tuple[Any, ...] = (),
        *,
        timestamp: int | None = None,
    ) -> str:
        """Sign and publish a public event; returns its public_event_id."""
        return wire_public.publish(self, who, channel_id=channel_id, event=event, tags=tags, timestamp=timestamp)

    def delete_public_event(self, who: Identity, public_event_id: str) -> dict[str, Any]:
        """Delete one of `who`'s own public events."""
        return wire_public.delete(self, who, public_event_id)

    def public_events(self, did: str, **kw: Any) -> wire_public.PublicPage | None:
        """GET /public/<did>, every event verified against `did` (see wire_public.read)."""
        return wire_public.read(self, did, **kw)


class MediatorDirectory:
    """Mediator DID → MediatorClient, for flows that cross mediators: a client talks to the other
    party's mediator directly, picked from the mediator segment of that party's DID
    (DCTRL-0005 dual delivery; there is no mediator-to-mediator protocol).

    Known mediators are added explicitly; an unknown `did:web` is reached at `<scheme>://<host>`
    and its DID document must name that same DID."""

    def __init__(self, *, scheme: str = "https", timeout: float = 10.0):
        self.scheme = scheme
        self.timeout = timeout
        self.clients: dict[str, MediatorClient] = {}

    def add(self, client: MediatorClient) -> MediatorClient:
        """Register `client` under the DID its document announces."""
        self.clients[client.did] = client
        client.directory = self
        return client

    def client_for(self, did: str) -> MediatorClient:
        """The client for a mediator DID, or for the mediator hosting a did:decentrl."""
        mediator_did = mediator_did_of(did)
        if mediator_did in self.clients:
            return self.clients[mediator_did]
        if not mediator_did.startswith("did:web:"):
            raise DidError(f"cannot reach mediator {mediator_did}")
        client = MediatorClient(f"{self.scheme}://{host_for_web_did(mediator_did)}", timeout=self.timeout)
        if client.did != mediator_did:
            client.close()
            raise DidError(f"{mediator_did} answers with another DID document")
        return self.add(client)

    def close(self) -> None:
        for client in self.clients.values():
            client.close()


__all__ = [
    "Identity",
    "MediatorClient",
    "MediatorDirectory",
    "MediatorError",
    "ONE_WAY_PUBLIC",
    "b64decode",
    "b64encode",
]
