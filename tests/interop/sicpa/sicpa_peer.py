"""SICPA `didcomm` 0.3.2 (PyPI) as an independent DIDComm v2 sender. Runs only in its own venv
(var/sicpa-venv, made by scripts/ensure_extra_sicpa.sh): it pins old pydid/pydantic.

Reads one JSON request on stdin, the same shape as tests/interop/node/didcomm_peer.js:
{docs: [DID doc, JsonWebKey2020 keys], secrets: [{id, privateKeyJwk}], jobs: [...]}; writes {results: [...]}.
Job: {op: "forward", message, to, from, routing_keys, enc_alg_anon}: authcrypt `message` from `from` to `to`,
then wrap it in routing/2.0 forwards for `routing_keys` (SICPA's wrap_in_forward). Results are
{ok: true, packed} or {ok: false, error}.
"""

import asyncio
import json
import sys

from didcomm.common.algorithms import AnonCryptAlg
from didcomm.common.resolvers import ResolversConfig
from didcomm.did_doc.did_doc import DIDDoc
from didcomm.did_doc.did_resolver_in_memory import DIDResolverInMemory
from didcomm.pack_encrypted import PackEncryptedConfig, pack_encrypted
from didcomm.protocols.routing.forward import wrap_in_forward
from didcomm.secrets.secrets_resolver_in_memory import SecretsResolverInMemory
from didcomm.secrets.secrets_util import jwk_to_secret

ENC = {
    "Xc20pEcdhEsA256kw": AnonCryptAlg.XC20P_ECDH_ES_A256KW,
    "A256gcmEcdhEsA256kw": AnonCryptAlg.A256GCM_ECDH_ES_A256KW,
    "A256cbcHs512EcdhEsA256kw": AnonCryptAlg.A256CBC_HS512_ECDH_ES_A256KW,
}


async def run(job, resolvers):
    if job["op"] != "forward":
        raise ValueError(f"unknown op {job['op']}")
    # forward=False: SICPA forwards by itself only to services that list "didcomm/v2" in accept, and
    # the Identus SDK's peer DIDs have `"a": []`; the routing keys are given, as with didcomm-node.
    packed = await pack_encrypted(
        resolvers, job["message"], to=job["to"], frm=job["from"], pack_config=PackEncryptedConfig(forward=False)
    )
    fwd = await wrap_in_forward(
        resolvers, json.loads(packed.packed_msg), job["to"], job["routing_keys"], ENC[job["enc_alg_anon"]]
    )
    return {"packed": json.dumps(fwd.msg_encrypted.msg)}


async def main():
    request = json.load(sys.stdin)
    resolvers = ResolversConfig(
        secrets_resolver=SecretsResolverInMemory(
            [jwk_to_secret({**s["privateKeyJwk"], "kid": s["id"]}) for s in request["secrets"]]
        ),
        did_resolver=DIDResolverInMemory([DIDDoc.deserialize(d) for d in request["docs"]]),
    )
    results = []
    for job in request["jobs"]:
        try:
            results.append({"ok": True, **(await run(job, resolvers))})
        except Exception as exc:  # noqa: BLE001 -- any failure is reported to the caller, as didcomm_peer.js does
            results.append({"ok": False, "error": f"{type(exc).__name__}: {exc}"})
    sys.stdout.write(json.dumps({"results": results}))


asyncio.run(main())
