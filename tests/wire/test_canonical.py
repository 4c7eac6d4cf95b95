"""Canonical JSON edge cases (docs/protocol-readings.md §2) and strict parsing of untrusted bytes."""

from __future__ import annotations

import json
import random
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from apps.wire.canonical import (
    MAX_DEPTH,
    CanonicalError,
    RawJSON,
    canonical_bytes,
    canonical_str,
    js_number,
    loads_strict,
)


def test_keys_are_sorted_at_every_depth_and_arrays_keep_their_order():
    obj = {"b": [3, {"d": 1, "c": 2}], "a": None, "A": True}
    assert canonical_str(obj) == '{"A":true,"a":null,"b":[3,{"c":2,"d":1}]}'


def test_the_digest_edge_example():
    obj = {"b": [3, {"d": 1, "c": "é\u2028\n\u0001"}], "a": None, "A": True}
    assert canonical_bytes(obj) == '{"A":true,"a":null,"b":[3,{"c":"é\u2028\\n\\u0001","d":1}]}'.encode()


def test_keys_sort_by_utf16_code_units_so_astral_keys_come_before_private_use_keys():
    # Code-point order would put U+E000 and U+FFFF before U+1F600; UTF-16 puts the surrogate 0xD83D first.
    obj = {"\uffff": 1, "\U0001f600": 2, "\ue000": 3, "z": 4}
    assert canonical_str(obj) == '{"z":4,"\U0001f600":2,"\ue000":3,"\uffff":1}'


def test_non_ascii_is_written_raw_as_utf8():
    assert canonical_bytes({"k": "é😀中"}) == '{"k":"é😀中"}'.encode()
    assert canonical_bytes("é") == b'"\xc3\xa9"'


def test_line_and_paragraph_separators_del_and_slash_stay_raw():
    assert canonical_str("\u2028\u2029\x7f/") == '"\u2028\u2029\x7f/"'


def test_control_characters_use_lowercase_u00xx_except_the_short_escapes():
    assert canonical_str("\x00\x01\x1f\x0b\x1b") == '"\\u0000\\u0001\\u001f\\u000b\\u001b"'
    assert canonical_str("\b\f\n\r\t") == '"\\b\\f\\n\\r\\t"'
    assert canonical_str('"\\') == '"\\"\\\\"'


@pytest.mark.parametrize(
    "value,text",
    [
        (1.0, "1"),
        (-0.0, "0"),
        (0.0, "0"),
        (1e21, "1e+21"),
        (1e20, "100000000000000000000"),
        (1e-7, "1e-7"),
        (0.000001, "0.000001"),
        (1.25e-6, "0.00000125"),
        (123e-20, "1.23e-18"),
        (1.5, "1.5"),
        (-2.5e-8, "-2.5e-8"),
        (0.1, "0.1"),
        (100.0, "100"),
        (123456789012345680000.0, "123456789012345680000"),
        (1.7976931348623157e308, "1.7976931348623157e+308"),
        (5e-324, "5e-324"),
    ],
)
def test_floats_are_printed_the_javascript_way(value, text):
    assert js_number(value) == text
    assert canonical_str([value]) == f"[{text}]"


def test_big_integers_are_printed_exactly():
    assert canonical_str(2**53 + 1) == "9007199254740993"
    assert canonical_str(-(10**40)) == "-" + "1" + "0" * 40
    assert canonical_str(loads_strict(b"12345678901234567890123")) == "12345678901234567890123"


def test_parsed_floats_canonicalise_like_javascript():
    assert (
        canonical_str(loads_strict(b"[1.0,-0.0,1e21,1E-7,0.0000010,123e-20]")) == "[1,0,1e+21,1e-7,0.000001,1.23e-18]"
    )


def test_null_true_false_and_empty_containers():
    assert canonical_str([None, True, False, {}, []]) == "[null,true,false,{},[]]"


def test_raw_json_is_emitted_verbatim():
    assert canonical_str({"b": RawJSON('{"z":1, "a":2}'), "a": 1}) == '{"a":1,"b":{"z":1, "a":2}}'


@pytest.mark.parametrize(
    "bad", [float("nan"), float("inf"), float("-inf"), "\ud800", {"\udc00": 1}, {1: 2}, b"x", {1, 2}]
)
def test_values_canonical_json_cannot_carry_are_refused(bad):
    with pytest.raises(CanonicalError):
        canonical_bytes(bad)


def test_canonicalising_too_deep_a_structure_is_refused():
    deep: list = []
    for _ in range(MAX_DEPTH + 2):
        deep = [deep]
    with pytest.raises(CanonicalError):
        canonical_bytes(deep)


@pytest.mark.parametrize(
    "raw",
    [
        b"NaN",
        b"[NaN]",
        b'{"a":Infinity}',
        b"-Infinity",
        b'"\\ud800"',
        b'"\\udc00x"',
        b'{"\\ud83d":1}',
        b'"\xff"',
        b'"\xed\xa0\x80"',  # a surrogate encoded as UTF-8 is not UTF-8
        b"\xc3",
        b"[" * 100 + b"]" * 100,
        b"[" * 100_000 + b"]" * 100_000,
        b"1e400",
        b"-1e400",
        b"[1" + b"0" * 400 + b".0]",
        b"1" + b"0" * 100,
        b"-" + b"9" * 5000,
        b"",
        b"{",
        b"{'a':1}",
        b'{"a":1,}',
        b"[01]",
    ],
)
def test_loads_strict_rejects_what_cannot_be_canonicalised(raw):
    with pytest.raises(CanonicalError):
        loads_strict(raw)


@pytest.mark.parametrize(
    "raw",
    [
        b'{"a":1,"a":1}',  # even with the same value
        b'{"a":1,"b":2,"a":3}',
        b'{"x":{"a":1,"a":2}}',
        b'[1,{"k":[{"a":null,"a":null}]}]',
        b'{"\\u0061":1,"a":2}',  # the same key, once escaped
        b'{"\\u00e9":1,"\xc3\xa9":2}',  # the same key, escaped and raw UTF-8
    ],
)
def test_loads_strict_refuses_a_key_repeated_within_one_object_at_any_depth(raw):
    with pytest.raises(CanonicalError, match="duplicate key"):
        loads_strict(raw)


def test_loads_strict_accepts_the_same_key_in_different_objects():
    assert loads_strict(b'{"a":{"a":1},"b":[{"a":2},{"a":3}]}') == {"a": {"a": 1}, "b": [{"a": 2}, {"a": 3}]}


def test_loads_strict_accepts_surrogate_pairs_and_moderate_nesting():
    assert loads_strict(b'"\\ud83d\\ude00"') == "\U0001f600"
    assert loads_strict(b"[" * MAX_DEPTH + b"]" * MAX_DEPTH) is not None
    assert loads_strict("1" * 64) == int("1" * 64)


# -- property: canonical output is independent of member order and survives a re-parse ----------

json_scalars = (
    st.none()
    | st.booleans()
    | st.integers(min_value=-(2**70), max_value=2**70)
    | st.floats(allow_nan=False, allow_infinity=False)
    | st.text(max_size=12)
)
json_values = st.recursive(
    json_scalars,
    lambda inner: st.lists(inner, max_size=4) | st.dictionaries(st.text(max_size=6), inner, max_size=5),
    max_leaves=20,
)


def _shuffled(value, rnd: random.Random):
    if isinstance(value, dict):
        items = list(value.items())
        rnd.shuffle(items)
        return {k: _shuffled(v, rnd) for k, v in items}
    if isinstance(value, list):
        return [_shuffled(v, rnd) for v in value]
    return value


@settings(max_examples=300, deadline=None)
@given(value=json_values, seed=st.integers(min_value=0, max_value=2**32))
def test_canonical_output_is_stable_under_key_permutation_and_reparsing(value, seed):
    first = canonical_bytes(value)
    assert canonical_bytes(_shuffled(value, random.Random(seed))) == first
    reparsed = loads_strict(first)
    assert canonical_bytes(reparsed) == first
    assert canonical_bytes(loads_strict(canonical_bytes(_shuffled(reparsed, random.Random(seed + 1))))) == first


# -- an independent encoder: answers recorded from Node.js (tests/wire/data/js_reference.json) ----

JS_REFERENCE = json.loads((Path(__file__).parent / "data" / "js_reference.json").read_text(encoding="utf-8"))


def test_numbers_print_exactly_as_nodejs_prints_them():
    assert len(JS_REFERENCE["numbers"]) > 400
    mismatches = [(r, js) for r, js in JS_REFERENCE["numbers"] if js_number(float(r)) != js]
    assert mismatches == []


def test_objects_canonicalise_exactly_as_nodejs_does():
    for obj, js in JS_REFERENCE["objects"]:
        assert canonical_str(obj) == js
        assert canonical_str(loads_strict(json.dumps(obj).encode())) == js
