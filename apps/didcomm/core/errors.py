"""Typed errors of the DIDComm core, each with a stable code and its Report Problem 2.0 code.

Messages never carry key material, ciphertexts or plaintexts: only algorithm names, curve
names and shapes, so an error can be logged or sent back as it is.
"""

from __future__ import annotations

import re
from typing import Any


class DidcommError(ValueError):
    """Base of every error the core raises on bad input. A subclass's `code` is its name in snake
    case (`InvalidKey`: `invalid_key`); its `problem_code` is given as a class keyword, by default
    a message the sender got wrong."""

    code = "didcomm_error"
    problem_code = "e.p.msg"

    def __init_subclass__(cls, problem_code: str | None = None, **kwargs: Any) -> None:
        super().__init_subclass__(**kwargs)
        cls.code = re.sub(r"(?<!^)(?=[A-Z])", "_", cls.__name__).lower()
        if problem_code is not None:
            cls.problem_code = problem_code


class InvalidKey(DidcommError):
    """A key is not valid in the claimed encoding, curve or length."""


class InvalidDid(DidcommError, problem_code="e.p.did.malformed"):
    """A DID (or DID URL) does not parse for its method."""


class UnsupportedDidMethod(DidcommError, problem_code="e.p.did.unresolvable"):
    """A DID method this library does not resolve."""


class MalformedEnvelope(DidcommError):
    """A JWE or JWS is not well-formed JSON of the DIDComm v2 shape."""


class UnsupportedAlgorithm(DidcommError, problem_code="e.p.trust.crypto.unsupported"):
    """An `alg`, `enc` or curve outside what DIDComm v2 (and this library) supports."""


class UnknownRecipientKey(DidcommError, problem_code="e.p.trust.crypto.unknown-key"):
    """No recipient `kid` of the JWE names a key we hold."""


class UnknownSenderKey(DidcommError, problem_code="e.p.trust.crypto.unknown-key"):
    """The authcrypt sender key (`skid`) does not resolve to a key-agreement key."""


class UndecryptableEnvelope(DidcommError, problem_code="e.p.trust.crypto"):
    """Key unwrapping, the tag or the header binding (`apu`/`apv`) did not verify."""


class InvalidSignature(DidcommError, problem_code="e.p.trust.crypto"):
    """A JWS signature does not verify, or names a key that does not resolve."""


class MalformedMessage(DidcommError):
    """A plaintext DIDComm message misses a required field or has one of the wrong type."""
