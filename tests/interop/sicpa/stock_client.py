"""A stock SICPA client of our mediator: `didcomm` 0.3.2 with `peerdid` 0.5.2 resolving every DID (PyPI, unpatched).

Runs only in its own venv (var/sicpa-venv, made by scripts/ensure_extra_sicpa.sh): they pin old pydid/pydantic.
It talks HTTP (urllib) to a real server and does only what an application on these libraries does: peerdid
makes and resolves its DIDs (keys named `#6LS…`, the first 8 characters of the fingerprint), `pack_encrypted`
picks keys, endpoints and forward wrapping from the resolved documents, `unpack` opens every answer.

The one piece of glue is `PeerDIDResolver`: peerdid 0.5 gives relative ids (`#6LSqg4J8`) where didcomm 0.3
looks keys up by absolute DID URLs, so the ids are prefixed with the DID, nothing else changed.

JSON lines: one command on stdin, one answer on stdout, each with the HTTP exchanges it made (`wire`):
  {"op": "mediate", "invitation_url"}  GET the invitation, mediate-request (CM 2.0) from a new host DID
  {"op": "register"}                   a new peer DID routed through the grant; keylist-update, keylist-query
  {"op": "send", "to", "text"}         a new sender DID authcrypts a basic message to `to`; pack_encrypted
                                       wraps it in a forward by the recipient's DID document; POST it
  {"op": "pickup"}                     status-request, delivery-request, unpack each attachment,
                                       messages-received (the ack), as the recipient's host DID
  {"op": "keys"}                       every party's DID and (throwaway) private keys, for the recording
Errors answer {"event": "error", "error"}.
"""

import asyncio
import json
import sys
import time
import urllib.error
import urllib.request
import uuid

from didcomm.common.resolvers import ResolversConfig
from didcomm.did_doc.did_doc import DIDDoc
from didcomm.did_doc.did_resolver import DIDResolver
from didcomm.message import Message
from didcomm.pack_encrypted import pack_encrypted
from didcomm.secrets.secrets_resolver import SecretsResolver
from didcomm.secrets.secrets_util import (
    generate_ed25519_keys_as_jwk_dict,
    generate_x25519_keys_as_jwk_dict,
    jwk_to_secret,
)
from didcomm.unpack import unpack
from peerdid.dids import create_peer_did_numalgo_2, resolve_peer_did
from peerdid.keys import Ed25519VerificationKey, KeyFormat, X25519KeyAgreementKey

CM2 = "https://didcomm.org/coordinate-mediation/2.0/"
PICKUP = "https://didcomm.org/messagepickup/3.0/"
BASIC = "https://didcomm.org/basicmessage/2.0/message"
ENCRYPTED = "application/didcomm-encrypted+json"
RELATIONSHIPS = ("authentication", "assertionMethod", "keyAgreement", "capabilityInvocation", "capabilityDelegation")


class PeerDIDResolver(DIDResolver):
    """peerdid 0.5.2's document (JWK keys), its relative ids made absolute for didcomm 0.3.2."""

    async def resolve(self, did):
        doc = resolve_peer_did(did, format=KeyFormat.JWK).serialize()
        absolute = lambda ref: did + ref if isinstance(ref, str) and ref.startswith("#") else ref  # noqa: E731
        for vm in doc.get("verificationMethod", []):
            vm["id"] = absolute(vm["id"])
        for name in RELATIONSHIPS:
            if name in doc:
                doc[name] = [absolute(ref) for ref in doc[name]]
        return DIDDoc.deserialize(doc)


class Secrets(SecretsResolver):
    """The client's private keys by kid (didcomm's in-memory resolver takes them only at construction)."""

    def __init__(self):
        self.by_kid = {}

    def add(self, secret):
        self.by_kid[secret.kid] = secret

    async def get_key(self, kid):
        return self.by_kid.get(kid)

    async def get_keys(self, kids):
        return [kid for kid in kids if kid in self.by_kid]


class Client:
    def __init__(self):
        self.secrets = Secrets()
        self.resolvers = ResolversConfig(secrets_resolver=self.secrets, did_resolver=PeerDIDResolver())
        self.parties = {}  # name -> {did, agreement (private JWK), authentication (private JWK)}
        self.wire = []
        self.mediator_did = self.endpoint = self.host = self.routing_did = self.peer = None

    async def new_did(self, name, service=None):
        """A did:peer:2 made by peerdid (E then V, as it orders them), its secrets under peerdid's key ids."""
        agreement, agreement_public = generate_x25519_keys_as_jwk_dict()
        auth, auth_public = generate_ed25519_keys_as_jwk_dict()
        did = str(
            create_peer_did_numalgo_2(
                [X25519KeyAgreementKey.from_jwk(agreement_public)],
                [Ed25519VerificationKey.from_jwk(auth_public)],
                service,
            )
        )
        doc = await self.resolvers.did_resolver.resolve(did)
        for kid, jwk in ((doc.key_agreement[0], agreement), (doc.authentication[0], auth)):
            self.secrets.add(jwk_to_secret({**jwk, "kid": str(kid)}))
        self.parties[name] = {"did": did, "agreement": agreement, "authentication": auth}
        return did

    def http(self, method, url, body=None):
        headers = {"Content-Type": ENCRYPTED} if body is not None else {}
        request = urllib.request.Request(
            url, data=body.encode() if body is not None else None, method=method, headers=headers
        )
        try:
            with urllib.request.urlopen(request, timeout=30) as resp:
                status, content_type, text = resp.status, resp.headers.get("Content-Type"), resp.read().decode()
        except urllib.error.HTTPError as err:
            status, content_type, text = err.code, err.headers.get("Content-Type"), err.read().decode()
        self.wire.append(
            {
                "method": method,
                "url": url,
                "request_content_type": headers.get("Content-Type"),
                "request_body": body,
                "status": status,
                "response_content_type": content_type,
                "response_body": text,
            }
        )
        return status, text

    async def exchange(self, frm, type_, body, return_route=True):
        """Authcrypt a message from `frm` to the mediator DID, POST it where the DID says, unpack the answer."""
        headers = {"return_route": "all"} if return_route else None
        msg = Message(
            id=str(uuid.uuid4()),
            type=type_,
            body=body,
            frm=frm,
            to=[self.mediator_did],
            created_time=int(time.time()),
            custom_headers=headers,
        )
        packed = await pack_encrypted(self.resolvers, msg, to=self.mediator_did, frm=frm)
        endpoint = packed.service_metadata.service_endpoint
        status, text = self.http("POST", str(endpoint), packed.packed_msg)
        if not text:
            return status, None
        if status >= 400 and not text.lstrip().startswith('{"protected"'):
            raise RuntimeError(f"{type_}: HTTP {status} {text}")
        answer = (await unpack(self.resolvers, text)).message
        return status, answer

    async def mediate(self, invitation_url):
        status, text = self.http("GET", invitation_url)
        assert status == 200, (status, text)
        self.mediator_did = json.loads(text)["from"]
        self.host = await self.new_did("host")
        status, grant = await self.exchange(self.host, CM2 + "mediate-request", {})
        assert grant.type == CM2 + "mediate-grant", grant.as_dict()
        self.routing_did = grant.body["routing_did"]
        return {
            "mediator_did": self.mediator_did,
            "host_did": self.host,
            "routing_did": self.routing_did,
            "status": status,
        }

    async def register(self):
        # The routed DID a sender resolves: the mediator's endpoint and its key-agreement key as routing key, the
        # string service form pydid 0.3 types as DIDComm (recipientKeys, routingKeys, accept).
        routing = await self.resolvers.did_resolver.resolve(self.routing_did)
        service = {
            "type": "DIDCommMessaging",
            "serviceEndpoint": str(routing.service[0].service_endpoint),
            "routingKeys": [str(routing.key_agreement[0])],
            "accept": ["didcomm/v2"],
            "recipientKeys": [],
        }
        self.peer = await self.new_did("peer", service)
        _, response = await self.exchange(
            self.host, CM2 + "keylist-update", {"updates": [{"recipient_did": self.peer, "action": "add"}]}
        )
        _, keylist = await self.exchange(self.host, CM2 + "keylist-query", {})
        return {
            "peer_did": self.peer,
            "update_response": response.as_dict(),
            "keylist": keylist.as_dict(),
        }

    async def send(self, to, text):
        sender = await self.new_did("sender")
        msg = Message(
            id=str(uuid.uuid4()), type=BASIC, body={"content": text}, frm=sender, to=[to], created_time=int(time.time())
        )
        packed = await pack_encrypted(self.resolvers, msg, to=to, frm=sender)  # forward wrapping as the DID says
        endpoint = str(packed.service_metadata.service_endpoint)
        status, body = self.http("POST", endpoint, packed.packed_msg)
        return {"id": msg.id, "sender_did": sender, "endpoint": endpoint, "status": status, "body": body}

    async def pickup(self):
        _, before = await self.exchange(self.host, PICKUP + "status-request", {})
        _, delivery = await self.exchange(self.host, PICKUP + "delivery-request", {"limit": 10})
        messages, ids = [], []
        for attachment in delivery.attachments or []:
            opened = await unpack(self.resolvers, attachment.data.json)
            messages.append(
                {
                    "id": opened.message.id,
                    "from": opened.message.frm,
                    "body": opened.message.body,
                    "encrypted_from": opened.metadata.encrypted_from,
                    "encrypted_to": opened.metadata.encrypted_to,
                }
            )
            ids.append(attachment.id)
        _, after = await self.exchange(self.host, PICKUP + "messages-received", {"message_id_list": ids})
        return {
            "status_before": before.as_dict(),
            "delivery_type": delivery.type,
            "messages": messages,
            "acked": ids,
            "status_after": after.as_dict(),
        }


async def main():
    client = Client()
    for line in sys.stdin:
        if not line.strip():
            continue
        command = json.loads(line)
        op = command.pop("op")
        if op == "exit":
            break
        client.wire = []
        try:
            if op == "keys":
                answer = {"parties": client.parties}
            else:
                answer = await getattr(client, op)(**command)
            answer = {"event": op, **answer, "wire": client.wire}
        except Exception as exc:  # noqa: BLE001 -- reported to the test with what was on the wire
            answer = {"event": "error", "op": op, "error": f"{type(exc).__name__}: {exc}", "wire": client.wire}
        sys.stdout.write(json.dumps(answer, default=str) + "\n")
        sys.stdout.flush()


asyncio.run(main())
