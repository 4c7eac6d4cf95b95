"""What the command tests share (tests/decentrl, tests/messaging, tests/realtime): row counts, raw
envelopes, the error body, and the fixtures their conftests take from here: the tenants with their
per-tenant rate limits switched off (0 = off), so that a limit cannot turn a conformance assertion
into RATE_LIMITED, `dave`, and `registered` (alice and bob registered with tenant A).

The shared fixtures (tenant_a/tenant_b, alice/bob/carol, post_a/post_b) live in tests/conftest.py.
"""

from __future__ import annotations

import time
import uuid

import pytest

from apps.wire.canonical import canonical_bytes
from apps.wire.client import Identity
from apps.wire.crypto import sign_json_object
from tests.support.registration import register

ERROR_CODES = {
    "INVALID_COMMAND",
    "INVALID_SIGNATURE",
    "INVALID_SIGNATURES",
    "UNAUTHORIZED_COMMAND",
    "TIMESTAMP_OUT_OF_RANGE",
    "DUPLICATE_NONCE",
    "SENDER_NOT_FOUND",
    "SENDER_SIGNING_KEY_NOT_FOUND",
    "RECIPIENT_NOT_FOUND",
    "RECIPIENT_NOT_REGISTERED",
    "COMMUNICATION_CONTRACT_NOT_FOUND",
    "PAYLOAD_TOO_LARGE",
    "RATE_LIMITED",
    "RECIPIENT_QUEUE_FULL",
    "MEDIATOR_UNAVAILABLE",
    "UNKNOWN_MEDIATOR",
}


def _limits_off(tenant):
    from apps.tenants.models import Tenant

    Tenant.objects.filter(pk=tenant.pk).update(rate_limit_per_did=0, rate_limit_per_ip=0)
    tenant.rate_limit_per_did = 0
    tenant.rate_limit_per_ip = 0
    return tenant


@pytest.fixture
def tenant_a(tenant_a):
    return _limits_off(tenant_a)


@pytest.fixture
def tenant_b(tenant_b):
    return _limits_off(tenant_b)


@pytest.fixture
def dave(tenant_a) -> Identity:
    """A third identity on tenant A."""
    return Identity.create("dave", tenant_a.did)


def row_counts() -> dict[str, int]:
    """Rows of every table a command can write to."""
    from apps.decentrl.models import Nonce
    from apps.messaging.models import Contract, ContractRequest, EventTag, PendingEvent, StoredEvent

    return {
        m.__name__: m.objects.count() for m in (Contract, ContractRequest, PendingEvent, StoredEvent, EventTag, Nonce)
    }


def data_counts() -> dict[str, int]:
    """Row counts without the nonce store (a nonce is consumed before later errors, by design)."""
    counts = row_counts()
    counts.pop("Nonce")
    return counts


def now_ms() -> int:
    return int(time.time() * 1000)


def envelope(who: Identity, payload, *, recipient_did: str, channel: str = "DIRECT_AUTHENTICATED", **header) -> dict:
    """A signed envelope whose header fields can be overridden before signing."""
    h = {
        "channel": channel,
        "sender_did": who.did,
        "sender_signing_key_id": who.key_id,
        "recipient_did": recipient_did,
        "timestamp": now_ms(),
        "nonce": str(uuid.uuid4()),
    }
    h.update(header)
    signable = {"header": h, "payload": payload}
    return {**signable, "signature": sign_json_object(signable, who.signing)}


def err(code: str) -> dict:
    return {"type": "ERROR", "code": code}


def body_of(env: dict) -> bytes:
    return canonical_bytes(env)


@pytest.fixture
def registered(post_a, tenant_a, alice, bob):
    """alice and bob registered on tenant A (their registration contracts are returned)."""
    return {"alice": register(post_a, alice, tenant_a), "bob": register(post_a, bob, tenant_a)}
