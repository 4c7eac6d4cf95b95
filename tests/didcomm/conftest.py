"""Shared fixtures for the DIDComm core tests: the spec's Appendix C keys and messages."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from apps.didcomm.core.keys import PrivateKey, PublicKey

HERE = Path(__file__).resolve().parent
VECTORS = json.loads((HERE / "vectors" / "didcomm_v2_spec_appendix_c.json").read_text())
UNSUPPORTED_CURVES = ("secp256k1",)


@pytest.fixture(scope="session")
def spec():
    """The vectors file, plus `private` (Bob's and Alice's secrets) and `public` (their DID doc keys) lookups."""
    private = {
        kid: PrivateKey.from_jwk(s["jwk"])
        for kid, s in VECTORS["secrets"].items()
        if "jwk" in s and s["jwk"]["crv"] not in UNSUPPORTED_CURVES
    }
    public = {
        kid: PublicKey.from_jwk(k["jwk"])
        for kid, k in VECTORS["public_keys"].items()
        if "jwk" in k and k["jwk"]["crv"] not in UNSUPPORTED_CURVES
    }
    return {"vectors": VECTORS, "private": private, "public": public}
