"""The one replay rule (apps/messaging/replay.py) at its edges: the window's comparison for each
protocol, a record kept through its expiry and past strictly after it (claim and prune alike), and a
key consumed when the statement carrying its claim fails."""

from __future__ import annotations

import pytest
from django.db import DatabaseError, connection, transaction

from apps.decentrl import storage
from apps.decentrl.models import Nonce
from apps.messaging import replay

pytestmark = pytest.mark.django_db

WIDTH = 300_000


@pytest.mark.parametrize(
    ("inclusive", "drift", "admitted"),
    [
        (True, WIDTH - 1, True),
        (True, WIDTH, True),  # DCTRL-0004 §5.4: "more than" the window is refused
        (True, WIDTH + 1, False),
        (False, WIDTH - 1, True),
        (False, WIDTH, False),  # §10.2 AUTHENTICATE: drift "< 5 minutes"
        (False, -WIDTH, False),
        (True, -WIDTH, True),
        (True, -WIDTH - 1, False),
    ],
)
def test_the_window_admits_a_drift_within_its_width_inclusive_or_not(inclusive, drift, admitted):
    now = 1_900_000_000_000
    assert replay.Window(WIDTH, inclusive=inclusive).admits(now - drift, now) is admitted


def _key(tenant, nonce: str) -> tuple:
    return tenant.pk, "did:example:sender", nonce


def test_a_record_is_kept_through_its_expiry_and_past_strictly_after_it(tenant_a):
    key = _key(tenant_a, "n-1")
    assert replay.claim(storage.CLAIM, [*key, 1_000, 10]) is True
    assert replay.claim(storage.CLAIM, [*key, 5_000, 1_000]) is False
    assert replay.past(Nonce.objects.all(), 1_000).count() == 0
    assert replay.past(Nonce.objects.all(), 1_001).count() == 1
    assert replay.claim(storage.CLAIM, [*key, 5_000, 1_001]) is True
    assert list(Nonce.objects.values_list("expires_at", flat=True)) == [5_000]


def test_a_key_whose_carrying_statement_fails_is_consumed_on_its_own(tenant_a):
    key = _key(tenant_a, "n-2")

    def failing_statement():
        # A claim and a failure in one statement: nothing of it commits (a savepoint in the test's
        # transaction stands for the command's own).
        with transaction.atomic(), connection.cursor() as cur:
            cur.execute(f"WITH claim AS ({storage.CLAIM}) SELECT 1 / 0 FROM claim", [*key, 9_000, 10])

    with pytest.raises(DatabaseError):
        replay.consumed(storage.CLAIM, [*key, 9_000, 10], failing_statement)
    assert list(Nonce.objects.filter(nonce="n-2").values_list("expires_at", flat=True)) == [9_000]
    assert replay.claim(storage.CLAIM, [*key, 9_000, 20]) is False


def test_a_run_that_succeeds_is_returned_and_claims_nothing_more(tenant_a):
    key = _key(tenant_a, "n-3")
    assert replay.consumed(storage.CLAIM, [*key, 9_000, 10], lambda: "answer") == "answer"
    assert not Nonce.objects.filter(nonce="n-3").exists()
