"""Record didcomm-node's envelopes as fixtures: `PYTHONPATH=. .venv/bin/python -m tests.interop.record_didcomm_node`.

Writes tests/interop/fixtures/didcomm_node_0.4.1.json: the parties' test keys (generated here, used nowhere
else), the plaintext, and node's exact output strings. tests/interop/test_didcomm_node_fixtures.py replays them.
"""

from __future__ import annotations

import json
from pathlib import Path

from apps.didcomm.core.keys import P256
from tests.interop import didcomm_node
from tests.interop.didcomm_node import Party, mediator, message

OUT = Path(__file__).resolve().parent / "fixtures" / f"didcomm_node_{didcomm_node.VERSION}.json"
ANON = ["Xc20pEcdhEsA256kw", "A256gcmEcdhEsA256kw", "A256cbcHs512EcdhEsA256kw"]


def main() -> None:
    med, alice, bob = mediator(), Party.create(), Party.create()
    alice_p256, bob_p256 = Party.create(P256), Party.create(P256)
    parties = [med, alice, bob, alice_p256, bob_p256]
    jobs = [{"op": "pack", "message": message(None, med), "to": med.did, "options": {"enc_alg_anon": a}} for a in ANON]
    jobs += [
        {"op": "pack", "message": message(alice, med), "to": med.did, "from": alice.did},
        {"op": "pack", "message": message(alice_p256, bob_p256), "to": bob_p256.did, "from": alice_p256.did},
        {"op": "pack", "message": message(alice, bob), "to": bob.did, "from": alice.did},
    ]
    results = didcomm_node.run(jobs, parties=parties, secrets_of=[alice, alice_p256])
    assert all(r["ok"] for r in results), results
    inner = results[-1]["packed"]
    [fwd] = didcomm_node.run(
        [
            {
                "op": "forward",
                "packed": inner,
                "to": bob.did,
                "routing_keys": [med.did + "#key-2"],
                "enc_alg_anon": ANON[0],
            }
        ],
        parties=parties,
        secrets_of=[],
    )
    assert fwd["ok"], fwd
    names = [f"anoncrypt_{a}" for a in ANON] + [
        "authcrypt_x25519_to_mediator",
        "authcrypt_p256",
        "authcrypt_alice_to_bob",
    ]
    data = {
        "source": f"didcomm-node {didcomm_node.VERSION} (npm), via tests/interop/node/didcomm_peer.js; test keys only",
        "parties": {
            n: p.to_json() for n, p in zip(["mediator", "alice", "bob", "alice_p256", "bob_p256"], parties, strict=True)
        },
        "plaintexts": {n: job["message"] for n, job in zip(names, jobs, strict=True)},
        "packed": {n: r["packed"] for n, r in zip(names, results, strict=True)}
        | {"forward_to_bob_via_mediator": fwd["packed"]},
    }
    OUT.write_text(json.dumps(data, indent=1) + "\n")
    print(f"wrote {OUT}")


if __name__ == "__main__":
    main()
