"""Tenant private keys encrypted at rest with the deployment key (AES-256-GCM, AAD = tenant slug + purpose)."""

from __future__ import annotations

import base64
import hashlib
import os

from cryptography.exceptions import InvalidTag
from cryptography.hazmat.primitives.ciphers.aead import AESGCM
from django.conf import settings
from django.core.exceptions import ImproperlyConfigured


def _deployment_key() -> bytes:
    raw = settings.MEDIATOR_DEPLOYMENT_KEY
    try:
        key = bytes.fromhex(raw)
    except ValueError:
        key = b""
    if len(key) != 32:
        # Accept any passphrase-like value by hashing it, but never an empty one.
        if not raw:
            raise ImproperlyConfigured("MEDIATOR_DEPLOYMENT_KEY is empty")
        key = hashlib.sha256(raw.encode("utf-8")).digest()
    return key


def seal(secret: bytes, *, context: str) -> str:
    """Encrypt a private key for storage; `context` binds it to its tenant and purpose."""
    nonce = os.urandom(12)
    ct = AESGCM(_deployment_key()).encrypt(nonce, secret, context.encode("utf-8"))
    return "v1:" + base64.b64encode(nonce + ct).decode("ascii")


def unseal(sealed: str, *, context: str) -> bytes:
    """Decrypt a sealed private key; a wrong deployment key fails loudly."""
    if not sealed.startswith("v1:"):
        raise ImproperlyConfigured("unknown sealed key format")
    blob = base64.b64decode(sealed[3:])
    try:
        return AESGCM(_deployment_key()).decrypt(blob[:12], blob[12:], context.encode("utf-8"))
    except InvalidTag as exc:
        raise ImproperlyConfigured("tenant key cannot be decrypted: wrong MEDIATOR_DEPLOYMENT_KEY?") from exc
