"""What the push providers share: the Retry-After rule and the bounded token cache."""

from __future__ import annotations

import pytest

from apps.push.providers.http import RETRY_AFTER_CAP_S, retry_after
from apps.push.providers.tokens import Token, TokenCache


@pytest.mark.parametrize(
    ("header", "seconds"),
    [
        (None, None),
        ("", None),
        ("soon", None),
        ("-5", None),
        ("120", 120.0),
        ("999999", RETRY_AFTER_CAP_S),
        ("Sun, 17 Mar 2030 17:48:20 GMT", 100.0),
        ("Sun, 17 Mar 2030 17:40:00 GMT", 0.0),
    ],
)
def test_retry_after_reads_seconds_or_a_date_and_caps_it(header, seconds):
    assert retry_after(header, now=1_900_000_000) == seconds


def test_the_token_cache_keeps_at_most_its_cap_and_forgets_the_least_recently_used():
    cache = TokenCache(cap=2)
    made: list[str] = []

    def get(key: str) -> Token:
        def make() -> Token:
            made.append(key)
            return Token(key, 0.0, 1.0)

        return cache.get(key, now=lambda: 0.0, fresh=lambda t, now: True, make=make)

    for key in ("a", "b", "a", "c", "a", "b"):
        get(key)

    assert made == ["a", "b", "c", "b"]


def test_a_dropped_token_is_made_again_unless_already_replaced():
    cache = TokenCache()
    tokens = iter([Token("1", 0, 1), Token("2", 0, 1), Token("3", 0, 1)])

    def get() -> Token:
        return cache.get("k", now=lambda: 0.0, fresh=lambda t, now: True, make=lambda: next(tokens))

    first = get()
    cache.drop("k", first)
    second = get()
    cache.drop("k", first)  # a stale refusal: the newer token stays

    assert (first.value, second.value, get().value) == ("1", "2", "2")
