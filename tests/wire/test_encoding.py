"""base64 leniency and multibase/multicodec keys (DCTRL-0002 §§9-10, docs/protocol-readings.md §§1-2)."""

from __future__ import annotations

import os

import pytest

from apps.wire.encoding import (
    ED25519_PUB,
    X25519_PUB,
    EncodingError,
    b58decode,
    b58encode,
    b64decode,
    b64encode,
    b64url_nopad,
    multikey_decode,
    multikey_encode,
)

# 0xfb 0xff 0xfe encodes to characters that differ between the two alphabets.
DATA = b"\xfb\xff\xfe\x00"


def test_encoders_emit_standard_padded_and_url_unpadded_forms():
    assert b64encode(DATA) == "+//+AA=="
    assert b64url_nopad(DATA) == "-__-AA"


@pytest.mark.parametrize("text", ["+//+AA==", "+//+AA", "-__-AA==", "-__-AA", "+//+AA="])
def test_b64decode_accepts_both_alphabets_padded_or_not(text):
    assert b64decode(text) == DATA


def test_b64decode_round_trips_every_length():
    for n in range(0, 70):
        data = os.urandom(n)
        assert b64decode(b64encode(data)) == data
        assert b64decode(b64url_nopad(data)) == data


@pytest.mark.parametrize(
    "text",
    [
        "+_/+AA==",  # mixed alphabets
        "-//-AA",  # mixed alphabets
        "Y",  # 1 char mod 4 can never be base64
        "YWJjZ",  # 5 chars
        "YQ===",  # too much padding
        "Y=Q=",  # padding in the middle
        "YW Jj",  # whitespace
        "YWJj\n",  # trailing newline
        "YW==\n",
        "\nYWJj",
        "YWJj!",  # junk
        "é",  # non-ASCII
    ],
)
def test_b64decode_rejects_malformed_input(text):
    with pytest.raises(EncodingError):
        b64decode(text)


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ("YWJjZ", "bad base64 length"),
        ("YWJj!", "not base64"),  # a foreign character is named before the length
        ("+_/-AA", "mixed base64 alphabets"),
        ("+_ -AA", "not base64"),  # ... and before the mix
        ("Y=Q=", "not base64"),
        ("YQ===", "not base64"),
        ("=YQ=", "not base64"),
    ],
)
def test_b64decode_says_which_rule_a_text_breaks(text, message):
    with pytest.raises(EncodingError) as err:
        b64decode(text)
    assert str(err.value) == message


def test_b64decode_of_a_large_text_matches_the_standard_decoder():
    data = os.urandom(3501)  # a forward's ciphertext is a few KB
    assert b64decode(b64url_nopad(data)) == data
    assert b64decode(b64encode(data)) == data
    with pytest.raises(EncodingError):
        b64decode(b64url_nopad(data)[:-5] + "\n" + b64url_nopad(data)[-5:])


@pytest.mark.parametrize("value", [None, 12, b"YWJj", ["YWJj"]])
def test_b64decode_rejects_non_strings(value):
    with pytest.raises(EncodingError):
        b64decode(value)


def test_base58_round_trips_and_keeps_leading_zero_bytes():
    assert b58encode(b"") == ""
    assert b58encode(b"\x00\x00\x01") == "112"
    assert b58decode("112") == b"\x00\x00\x01"
    for n in range(1, 40):
        data = b"\x00" * (n % 3) + os.urandom(n)
        assert b58decode(b58encode(data)) == data


@pytest.mark.parametrize("prefix,start", [(ED25519_PUB, "z6Mk"), (X25519_PUB, "z6LS")])
def test_multikeys_round_trip_with_their_multicodec_prefix(prefix, start):
    for _ in range(20):
        key = os.urandom(32)
        text = multikey_encode(prefix, key)
        assert text.startswith(start)
        assert multikey_decode(prefix, text) == key


def test_multikey_decode_rejects_the_other_key_type():
    key = os.urandom(32)
    with pytest.raises(EncodingError):
        multikey_decode(X25519_PUB, multikey_encode(ED25519_PUB, key))
    with pytest.raises(EncodingError):
        multikey_decode(ED25519_PUB, multikey_encode(X25519_PUB, key))


@pytest.mark.parametrize(
    "text",
    [
        "6MktwupdmLXVVqTzCw4i46r4uGyosGXRnR3XjN4Zq7oMMsw",  # no multibase prefix
        "f6MktwupdmLXVVqTzCw4i46r4uGyosGXRnR3XjN4Zq7oMMsw",  # another multibase prefix
        "Z6MktwupdmLXVVqTzCw4i46r4uGyosGXRnR3XjN4Zq7oMMsw",
        "z0MktwupdmLXVVqTzCw4i46r4uGyosGXRnR3XjN4Zq7oMMsw",  # '0' is not base58btc
        "z6MktwupdmLXVVqTzCw4i46r4uGyosGXRnR3XjN4Zq7oMMsI",  # 'I' is not base58btc
        "z6MktwupdmLXVVqTzCw4i46r4uGyosGXRnR3XjN4Zq7oMMs",  # one character short: wrong length
        "z6MktwupdmLXVVqTzCw4i46r4uGyosGXRnR3XjN4Zq7oMMsww",  # one character long: wrong length
        "zFVen3X669xLzsi6N2V91DoiyzHzg1uAgqiT8jZ9nS96Z",  # raw key, no multicodec
        "z",
        "",
        "z" + "2" * 80,  # oversized
    ],
)
def test_multikey_decode_rejects_bad_prefix_length_and_alphabet(text):
    with pytest.raises(EncodingError):
        multikey_decode(ED25519_PUB, text)


def test_multikey_decode_rejects_31_and_33_byte_keys():
    for n in (31, 33):
        with pytest.raises(EncodingError):
            multikey_decode(ED25519_PUB, "z" + b58encode(ED25519_PUB + os.urandom(n)))
