"""At the exact edge of the window (now = header.timestamp + window) the timestamp check still
accepts a command, so its nonce must still count as used there, and may only be reused after."""

import pytest

from apps.decentrl import storage
from apps.decentrl.models import Nonce
from apps.decentrl.nonces import nonces_prune
from apps.decentrl.storage import NonceClaim

WINDOW = 300_000


@pytest.mark.django_db
def test_a_nonce_is_still_consumed_at_the_exact_end_of_its_window(tenant_a):
    ts = 1_700_000_000_000
    args = {"tenant_id": tenant_a.pk, "sender_did": "did:example:s", "nonce": "n-1", "expires_at_ms": ts + WINDOW}
    assert storage.claim(NonceClaim(**args, now_ms=ts)) is True
    # the timestamp check still accepts this moment
    assert storage.claim(NonceClaim(**args, now_ms=ts + WINDOW)) is False
    assert nonces_prune(now_ms=ts + WINDOW) == 0
    assert Nonce.objects.count() == 1
    assert nonces_prune(now_ms=ts + WINDOW + 1) == 1
