"""Pruning the nonce store. The claim itself is in apps/protocol/storage.py (CLAIM)."""

from __future__ import annotations

from .models import Nonce


def nonces_prune(*, now_ms: int) -> int:
    """Delete expired nonces (DCTRL-0004 §5.3); safe to run concurrently."""
    deleted, _ = Nonce.objects.filter(expires_at__lt=now_ms).delete()
    return deleted
