"""Drive didcomm-node 0.4.1 (npm, WASM) as an independent DIDComm v2 peer: parties, DID docs in its shape, one subprocess per batch."""

from __future__ import annotations

import json
import subprocess
from dataclasses import dataclass
from pathlib import Path

from apps.didcomm.core.did_peer import mediator_peer_did, peer2_create
from apps.didcomm.core.diddoc import DidDocument
from apps.didcomm.core.keys import ED25519, X25519, PrivateKey
from apps.didcomm.core.resolver import resolve_did

NODE_DIR = Path(__file__).resolve().parent / "node"
SCRIPT = NODE_DIR / "didcomm_peer.js"
VERSION = "0.4.1"


def installed_version() -> str | None:
    """The didcomm-node version under tests/interop/node, or None (run scripts/ensure_extra_didcomm_node.sh)."""
    pkg = NODE_DIR / "node_modules" / "didcomm-node" / "package.json"
    return json.loads(pkg.read_text())["version"] if pkg.exists() else None


@dataclass(frozen=True)
class Party:
    """A DIDComm v2 party with a did:peer:2 (E then V, as the Identus SDK makes them) and its private keys."""

    did: str
    agreement: PrivateKey
    authentication: PrivateKey

    @classmethod
    def create(cls, agreement_crv: str = X25519) -> Party:
        agreement, auth = PrivateKey.generate(agreement_crv), PrivateKey.generate(ED25519)
        did = peer2_create([("E", agreement.public), ("V", auth.public)])
        return cls(did, agreement, auth)

    @classmethod
    def from_json(cls, data: dict) -> Party:
        return cls(data["did"], PrivateKey.from_jwk(data["agreement"]), PrivateKey.from_jwk(data["authentication"]))

    def to_json(self) -> dict:
        return {"did": self.did, "agreement": self.agreement.to_jwk(), "authentication": self.authentication.to_jwk()}

    @property
    def document(self) -> DidDocument:
        return resolve_did(self.did)

    @property
    def agreement_kid(self) -> str:
        """The kid of our agreement key in the DID (a DID may list several)."""
        return next(vm.id for vm in self.document.key_agreement if vm.key == self.agreement.public)

    @property
    def authentication_kid(self) -> str:
        return next(vm.id for vm in self.document.authentication if vm.key == self.authentication.public)

    def secrets(self) -> dict:
        """kid -> private key, for our own decrypt lookups."""
        return {self.agreement_kid: self.agreement}


def node_doc(doc: DidDocument) -> dict:
    """A resolved document in didcomm-node's shape: absolute ids, JsonWebKey2020 keys, no services."""
    return {
        "id": doc.id,
        "keyAgreement": [vm.id for vm in doc.key_agreement],
        "authentication": [vm.id for vm in doc.authentication],
        "verificationMethod": [
            {"id": vm.id, "type": "JsonWebKey2020", "controller": doc.id, "publicKeyJwk": vm.key.to_jwk()}
            for vm in doc.verification_methods
        ],
        "service": [],
    }


def node_secrets(party: Party) -> list[dict]:
    keys = {party.agreement_kid: party.agreement, party.authentication_kid: party.authentication}
    return [{"id": kid, "type": "JsonWebKey2020", "privateKeyJwk": key.to_jwk()} for kid, key in keys.items()]


def run(jobs: list[dict], *, parties: list[Party], secrets_of: list[Party], timeout: float = 60) -> list[dict]:
    """Run `jobs` in one didcomm-node process that knows every party's DID doc and `secrets_of`'s private keys."""
    request = {
        "docs": [node_doc(p.document) for p in parties],
        "secrets": [s for p in secrets_of for s in node_secrets(p)],
        "jobs": jobs,
    }
    out = subprocess.run(
        ["node", str(SCRIPT)], input=json.dumps(request), cwd=NODE_DIR, capture_output=True, text=True, timeout=timeout
    )
    if out.returncode != 0:
        raise RuntimeError(f"didcomm-node failed: {out.stderr[-2000:]}")
    return json.loads(out.stdout)["results"]


def mediator() -> Party:
    """A mediator party with our did:peer:2 shape (V, E, http and ws services)."""
    agreement, auth = PrivateKey.generate(X25519), PrivateKey.generate(ED25519)
    did = mediator_peer_did(
        authentication=auth.public,
        agreement=agreement.public,
        http_uri="https://m.example/didcomm",
        ws_uri="wss://m.example/didcomm/ws",
    )
    return Party(did, agreement, auth)


def message(sender: Party | None, recipient: Party, body: dict | None = None) -> dict:
    """A trust-ping plaintext from `sender` (None: anonymous) to `recipient`."""
    msg = {
        "id": "5b1f6a1e-0000-4000-8000-000000000001",
        "typ": "application/didcomm-plain+json",
        "type": "https://didcomm.org/trust-ping/2.0/ping",
        "to": [recipient.did],
        "created_time": 1767225600,
        "body": body or {"response_requested": True},
    }
    if sender:
        msg["from"] = sender.did
    return msg


def forward_via(mediator_did: str, sender: Party, recipient_did: str, msg: dict, *, enc_alg_anon: str) -> str:
    """didcomm-node authcrypts `msg` from `sender` to `recipient_did` and wraps it in a routing/2.0 forward,
    anoncrypt to the mediator's key-agreement key (`#key-2` of our mediator DID): the body to POST."""
    med, recipient = Party(mediator_did, None, None), Party(recipient_did, None, None)  # public documents only
    [packed] = run(
        [{"op": "pack", "message": msg, "to": recipient_did, "from": sender.did}],
        parties=[med, sender, recipient],
        secrets_of=[sender],
    )
    assert packed["ok"], packed
    [fwd] = run(
        [
            {
                "op": "forward",
                "packed": packed["packed"],
                "to": recipient_did,
                "routing_keys": [mediator_did + "#key-2"],
                "enc_alg_anon": enc_alg_anon,
            }
        ],
        parties=[med, sender, recipient],
        secrets_of=[],
    )
    assert fwd["ok"], fwd
    return fwd["packed"]


SICPA_PYTHON = NODE_DIR.parents[2] / "var" / "sicpa-venv" / "bin" / "python"
SICPA_SCRIPT = NODE_DIR.parent / "sicpa" / "sicpa_peer.py"


def sicpa_forward_via(mediator_did: str, sender: Party, recipient_did: str, msg: dict, *, enc_alg_anon: str) -> str:
    """As `forward_via`, built by SICPA `didcomm` 0.3.2 (Python) in its own venv (scripts/ensure_extra_sicpa.sh)."""
    med, recipient = Party(mediator_did, None, None), Party(recipient_did, None, None)
    request = {
        "docs": [node_doc(p.document) for p in (med, sender, recipient)],
        "secrets": node_secrets(sender),
        "jobs": [
            {
                "op": "forward",
                "message": msg,
                "to": recipient_did,
                "from": sender.did,
                "routing_keys": [mediator_did + "#key-2"],
                "enc_alg_anon": enc_alg_anon,
            }
        ],
    }
    out = subprocess.run(
        [str(SICPA_PYTHON), str(SICPA_SCRIPT)], input=json.dumps(request), capture_output=True, text=True, timeout=60
    )
    if out.returncode != 0:
        raise RuntimeError(f"SICPA didcomm failed: {out.stderr[-2000:]}")
    [result] = json.loads(out.stdout)["results"]
    assert result["ok"], result
    return result["packed"]
