"""Typed errors of the DIDComm core, each with a stable code and its Report Problem 2.0 code.

Messages never carry key material, ciphertexts or plaintexts: only algorithm names, curve
names and shapes, so an error can be logged or sent back as it is.
"""

from __future__ import annotations


class DidcommError(ValueError):
    """Base of every error the core raises on bad input."""

    code = "didcomm_error"
    problem_code = "e.p.msg"  # Report Problem 2.0: a message the sender got wrong


class InvalidKey(DidcommError):
    """A key is not valid in the claimed encoding, curve or length."""

    code = "invalid_key"


class InvalidDid(DidcommError):
    """A DID (or DID URL) does not parse for its method."""

    code = "invalid_did"
    problem_code = "e.p.did.malformed"


class UnsupportedDidMethod(DidcommError):
    """A DID method this library does not resolve."""

    code = "unsupported_did_method"
    problem_code = "e.p.did.unresolvable"


class MalformedEnvelope(DidcommError):
    """A JWE or JWS is not well-formed JSON of the DIDComm v2 shape."""

    code = "malformed_envelope"


class UnsupportedAlgorithm(DidcommError):
    """An `alg`, `enc` or curve outside what DIDComm v2 (and this library) supports."""

    code = "unsupported_algorithm"
    problem_code = "e.p.trust.crypto.unsupported"


class UnknownRecipientKey(DidcommError):
    """No recipient `kid` of the JWE names a key we hold."""

    code = "unknown_recipient_key"
    problem_code = "e.p.trust.crypto.unknown-key"


class UnknownSenderKey(DidcommError):
    """The authcrypt sender key (`skid`) does not resolve to a key-agreement key."""

    code = "unknown_sender_key"
    problem_code = "e.p.trust.crypto.unknown-key"


class UndecryptableEnvelope(DidcommError):
    """Key unwrapping, the tag or the header binding (`apu`/`apv`) did not verify."""

    code = "undecryptable_envelope"
    problem_code = "e.p.trust.crypto"


class InvalidSignature(DidcommError):
    """A JWS signature does not verify, or names a key that does not resolve."""

    code = "invalid_signature"
    problem_code = "e.p.trust.crypto"


class MalformedMessage(DidcommError):
    """A plaintext DIDComm message misses a required field or has one of the wrong type."""

    code = "malformed_message"
