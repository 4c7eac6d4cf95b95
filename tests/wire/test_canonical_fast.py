"""The C-encoder fast path of canonical JSON must print exactly what the reference encoder prints
(apps/wire/canonical.py), and fail exactly where it fails."""

from __future__ import annotations

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from apps.wire import canonical
from apps.wire.canonical import CanonicalError, RawJSON, canonical_bytes, canonical_str

# Every code point, lone surrogates included, and keys that stress UTF-16 vs code-point order.
texts = st.text(alphabet=st.characters(min_codepoint=0, max_codepoint=0x10FFFF), max_size=12)
keys = st.one_of(texts, st.sampled_from(["a", "b", "\ue000", "\U0001f600", "\uffff", "A", "", "é"]))
scalars = st.one_of(
    st.none(),
    st.booleans(),
    st.integers(min_value=-(2**70), max_value=2**70),
    st.floats(allow_nan=False, allow_infinity=False),
    texts,
    st.builds(RawJSON, st.sampled_from(['{"b":1,"a":2}', "[1,2]", '"x"'])),
)
values = st.recursive(
    scalars,
    lambda inner: st.one_of(
        st.lists(inner, max_size=4), st.tuples(inner, inner), st.dictionaries(keys, inner, max_size=4)
    ),
    max_leaves=25,
)


def _reference(obj):
    try:
        return canonical._slow_canonical_str(obj)
    except CanonicalError:
        return CanonicalError


def _fast(obj):
    try:
        return canonical_str(obj)
    except CanonicalError:
        return CanonicalError


@settings(max_examples=1500, suppress_health_check=[HealthCheck.too_slow])
@given(values)
def test_fast_path_equals_the_reference_encoder(obj):
    expected = _reference(obj)
    assert _fast(obj) == expected
    if expected is not CanonicalError:
        assert canonical_bytes(obj) == expected.encode("utf-8")


@pytest.mark.parametrize(
    ("obj", "text"),
    [
        ({"b": 1, "a": [True, None, "x\n\u2028\x7f"]}, '{"a":[true,null,"x\\n\u2028\x7f"],"b":1}'),
        ({"n": 2**64}, '{"n":18446744073709551616}'),
        ({"f": 1.0, "g": 1e21}, '{"f":1,"g":1e+21}'),  # floats: JavaScript formatting, not repr
        ({"\ue000": 1, "\U0001f600": 2}, '{"\U0001f600":2,"\ue000":1}'),  # UTF-16 order
        ({"r": RawJSON('{"z":1}')}, '{"r":{"z":1}}'),
    ],
)
def test_known_outputs(obj, text):
    assert canonical_str(obj) == text


def test_plain_values_take_the_c_encoder_and_the_rest_the_reference(monkeypatch):
    calls = []
    real = canonical._slow_canonical_str
    monkeypatch.setattr(canonical, "_slow_canonical_str", lambda obj: calls.append(obj) or real(obj))
    canonical_str({"type": "SUCCESS", "items": [{"id": "x", "n": 3}]})
    assert calls == []
    canonical_str({"f": 0.5})
    assert calls == [{"f": 0.5}]


@pytest.mark.parametrize(
    "bad",
    [
        {"s": "\ud800"},
        {"\udfff": 1},
        {1: "non-string key"},
        {"x": float("nan")},
        {"x": object()},
    ],
)
def test_what_cannot_be_canonical_raises_on_both_paths(bad):
    with pytest.raises(CanonicalError):
        canonical_str(bad)
    with pytest.raises(CanonicalError):
        canonical_bytes(bad)


def test_nesting_limit_is_the_reference_one():
    ok = deep = []
    for _ in range(canonical.MAX_DEPTH - 1):
        deep.append([])
        deep = deep[0]
    assert canonical_str(ok) == canonical._slow_canonical_str(ok)
    too_deep = [ok, [[]]]
    for _ in range(3):
        too_deep = [too_deep]
    with pytest.raises(CanonicalError):
        canonical._slow_canonical_str(too_deep)
    with pytest.raises(CanonicalError):
        canonical_str(too_deep)
