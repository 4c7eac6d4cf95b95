"""DIDComm v2's door of the one message path (dispatch.py; docs/didcomm.md).

The authcrypt sender is the DID of `skid` (core.resolver); a signed inner message is verified and
`from` checked against both; an authcrypt message other than a forward has its id claimed with its
handler (replay.claimed_run); the response is authcrypt from the mediator DID the caller addressed,
to its `skid`. Problems are Report Problem 2.0 with `pthid` = the thread: plaintext while the sender
is unknown, authcrypt to it once authenticated.
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field

from apps.didcomm.core import jwe, jws
from apps.didcomm.core.errors import DidcommError
from apps.didcomm.core.message import ENCRYPTED, SIGNED, PlainMessage, envelope_kind, parse_plaintext
from apps.didcomm.core.resolver import authentication_key, key_agreement_key
from apps.tenants.models import Tenant
from apps.usage import records

from . import handlers, protocols
from .door import ENCRYPTED_MEDIA, PLAIN_MEDIA, Reply, json_bytes, problem_reply
from .identity import Accepting
from .models import DidcommPolicy, MediatorIdentity
from .packing import pack_for_kid, stamp
from .problems import Problem, problem_message, pthid_of, unsupported_type
from .protocols import Code
from .replay import claimed_run

MAX_NESTING = 2  # anoncrypt(authcrypt(…)) at most


@dataclass
class Context:
    """What a v2 handler may know about the message it handles (never the raw bytes)."""

    tenant: Tenant
    policy: DidcommPolicy
    identity: MediatorIdentity  # the mediator identity the sender addressed; answers come from it
    # Its key-agreement key as the sender named it (either DID of the identity, any id form): answers
    # come from that DID and name that key, which is what the sender's library resolves.
    mediator_kid: str
    caller_did: str | None  # the authcrypt sender's DID (from skid), None for anoncrypt
    caller_kid: str | None
    transport: str
    live: bool | None  # None on HTTP; on a socket, whether live delivery is on
    signer_kid: str | None = None  # the verified JWS signature's kid of a signed inner message
    code: str = "SUCCESS"
    extra: dict = field(default_factory=dict)

    @property
    def mediator_did(self) -> str:
        """The mediator DID the sender addressed (`identity.did` or `identity.legacy_did`)."""
        return self.mediator_kid.split("#", 1)[0]


def run(ctx: Context, message: PlainMessage) -> handlers.Outcome:
    """The handler of the message's type, or the unsupported-type problem."""
    handler = handlers.HANDLERS.get(message.type)
    if handler is None:
        raise unsupported_type()
    return handler(ctx, message)


class V2Door:
    name = "v2"
    protocol = records.DIDCOMM_V2
    media = (ENCRYPTED_MEDIA, "application/json")

    def open(
        self, raw: bytes, envelope: dict | None, tenant: Tenant, accepting: Accepting, transport: str, live: bool | None
    ) -> tuple[PlainMessage, Context]:
        """Decrypt (nested at most MAX_NESTING), verify an inner JWS, parse the plaintext."""
        identities = accepting.identities_now()
        docs = {did: (ident, accepting.documents[did]) for ident in identities for did in ident.dids}
        used: list[tuple[MediatorIdentity, str]] = []

        def private_key_for(kid: str):
            entry = docs.get(kid.split("#", 1)[0])
            if entry is None:
                return None
            ident, doc = entry
            vm = doc.find(kid, "keyAgreement")
            if vm is None or vm.key.raw != bytes(ident.agreement_public):
                return None
            return ident.agreement_key

        obj = jwe.parse_envelope(raw if envelope is None else envelope)
        if envelope_kind(obj) != ENCRYPTED:
            raise Problem(Code.UNAUTHENTICATED, "messages to this mediator must be encrypted (JWE)")
        sender_kid = None
        for _ in range(MAX_NESTING):
            decrypted = jwe.decrypt(obj, private_key_for=private_key_for, sender_key_for=key_agreement_key)
            used.append((docs[decrypted.recipient_kid.split("#", 1)[0]][0], decrypted.recipient_kid))
            sender_kid = decrypted.sender_kid or sender_kid
            obj = jwe.parse_envelope(decrypted.plaintext)
            if envelope_kind(obj) != ENCRYPTED:
                break
        else:
            raise Problem("e.p.msg", "envelope nested too deeply")
        signer = signer_kid = None
        plaintext: bytes | dict[str, object] = obj
        if envelope_kind(obj) == SIGNED:
            verified = jws.verify(obj, public_key_for=authentication_key)
            signer_kid = verified.signer_kids[0]
            signer = signer_kid.split("#", 1)[0]
            plaintext = verified.payload
        message = parse_plaintext(plaintext)
        sender_did = sender_kid.split("#", 1)[0] if sender_kid else None
        # DIDComm v2: `from` must be the authcrypt sender's (and a signer's) DID.
        for claimed in (signer, message.from_):
            if claimed is not None and sender_did is not None and claimed != sender_did:
                problem = Problem(Code.SENDER_MISMATCH, "from does not match the sender key")
                problem.message = message
                raise problem
        identity, mediator_kid = used[0]
        ctx = Context(
            tenant, accepting.policy, identity, mediator_kid, sender_did, sender_kid, transport, live, signer_kid
        )
        return message, ctx

    def answer(self, ctx: Context, message: PlainMessage) -> Reply:
        if ctx.caller_did and message.type != protocols.FORWARD:
            outcome = claimed_run(ctx.tenant, ctx.caller_did, message, lambda: run(ctx, message))
        else:
            outcome = run(ctx, message)
        if outcome.response is None or message.return_route not in ("all", "thread") or ctx.caller_kid is None:
            # Handled, but the answer has no way back (we make no outbound connections): 202, no body.
            return Reply(202, live=outcome.live, pickup=outcome.pickup)
        response = stamp(outcome.response, from_did=ctx.mediator_did, to_did=ctx.caller_did)
        if "thid" not in response and "pthid" not in response:
            response["thid"] = message.thid or message.id
        envelope = pack_for_kid(response, identity=ctx.identity, kid=ctx.caller_kid, sender_kid=ctx.mediator_kid)
        return Reply(200, json_bytes(envelope), ENCRYPTED_MEDIA, live=outcome.live, pickup=outcome.pickup)

    def problem(self, problem: Problem, message: PlainMessage | None, ctx: Context | None) -> Reply:
        """Authcrypt to the sender when it is known, plaintext otherwise; the HTTP status says the error."""
        pthid = pthid_of(message)
        kind = protocols.problem_type(message.type if message is not None else None, protocols.PROBLEM_REPORT)
        if ctx is not None and ctx.caller_kid is not None:
            report = problem_message(
                problem.code, problem.comment, pthid=pthid, from_did=ctx.mediator_did, to=ctx.caller_did, type_=kind
            )
            report["created_time"] = int(time.time())
            try:
                envelope = pack_for_kid(report, identity=ctx.identity, kid=ctx.caller_kid, sender_kid=ctx.mediator_kid)
                return problem_reply(problem, envelope, ENCRYPTED_MEDIA)
            except DidcommError:
                pass
        report = problem_message(problem.code, problem.comment, pthid=pthid, type_=kind)
        return problem_reply(problem, report, PLAIN_MEDIA)

    def caller(self, ctx: Context) -> tuple[str | None, str | None]:
        return ctx.caller_did, ctx.caller_kid

    def rate_key(self, ctx: Context) -> str | None:
        return ctx.caller_did


V2 = V2Door()
