"""Other identities in bulk, shaped like real rows: the filler of the data-growth benchmark
(bench/data_bench.py) and of the query-plan checks (tests/test_query_plans.py).

`FILL_SQL` inserts identities `lo`..`hi` with one `INSERT … SELECT generate_series` per table, every
row a copy of a real one (made through the protocol) with its DID's alias or tail replaced:

- a Decentrl identity: its registration (a contract with the tenant), a contract with its peer
  (identities 2k and 2k+1), one unacknowledged pending event from the peer and one stored event
  with one encrypted tag;
- a DIDComm client: its granted mediation (a did:peer:2 as long as the real one), one recipient
  DID and one queued message (the real data object's size).

The queue-depth counters follow through their triggers. `params` builds the statements' parameters
from the real rows.
"""

from __future__ import annotations

FILLED_TABLES = [
    "messaging_contract", "messaging_pendingevent", "messaging_storedevent", "messaging_eventtag",
    "didcomm_mediation", "didcomm_recipientkey", "didcomm_queuedmessage",
]  # fmt: skip


def params(
    *, tenant_id: int, tenant_did: str, sender_did: str, recipient_did: str,
    registration: str, contract: str, tag_len: int, client_did: str, rcpt_did: str, data: str,
) -> dict:  # fmt: skip
    """FILL_SQL's parameters (without `lo`/`hi`): `sender_did` is a registered
    identity and `registration` its registration's signed contract text; `contract` the signed text of
    a contract between it and `recipient_did`; `tag_len` an encrypted tag's length; `client_did` a
    granted DIDComm client, `rcpt_did` its recipient DID and `data` a queued message's data text."""
    parts = sender_did.split(":")  # did:decentrl:{alias}:{signing}:{pre}:{mediator}
    head, tail = ":".join(parts[:2]), ":".join(parts[3:])
    return {
        "t": tenant_id, "tenant_did": tenant_did, "did_a": head + ":", "did_b": ":" + tail,
        "s_did": sender_did, "r_did": recipient_did, "reg": registration, "peer": contract,
        "payload": "A" * 256, "event_payload": "B" * 200, "tag_len": tag_len,
        "client": client_did, "rcpt": rcpt_did, "data": data,
    }  # fmt: skip


_DID = "%(did_a)s || 'f' || lpad(g::text, 9, '0') || %(did_b)s"
_PEER = "%(did_a)s || 'f' || lpad((g # 1)::text, 9, '0') || %(did_b)s"
FILL_SQL = [
    # Registration: a contract with the tenant, the identity its owner and requestor.
    f"""INSERT INTO messaging_contract (public_id, tenant_id, owner_did, requestor_did, recipient_did, expires_at,
        contract_hash, signed_contract, created_at)
    SELECT gen_random_uuid(), %(t)s, d, d, %(tenant_did)s, extract(epoch FROM now())::bigint + 86400 * 30,
        encode(sha256(convert_to('r' || d, 'UTF8')), 'hex'), replace(%(reg)s, %(s_did)s, d), now()
    FROM (SELECT {_DID} AS d FROM generate_series(%(lo)s::int, %(hi)s::int) g) x""",
    # A contract with its peer (identities 2k and 2k+1), owned by each side.
    f"""INSERT INTO messaging_contract (public_id, tenant_id, owner_did, requestor_did, recipient_did, expires_at,
        contract_hash, signed_contract, created_at)
    SELECT gen_random_uuid(), %(t)s, d, p, d, extract(epoch FROM now())::bigint + 86400 * 30,
        encode(sha256(convert_to('c' || d, 'UTF8')), 'hex'),
        replace(replace(%(peer)s, %(s_did)s, p), %(r_did)s, d), now()
    FROM (SELECT {_DID} AS d, {_PEER} AS p FROM generate_series(%(lo)s::int, %(hi)s::int) g) x""",
    # One unacknowledged pending event from the peer (the queue-depth triggers count it).
    f"""INSERT INTO messaging_pendingevent (public_id, tenant_id, recipient_did, sender_did, payload, payload_bytes,
        created_at)
    SELECT gen_random_uuid(), %(t)s, d, p, %(payload)s, 256, now()
    FROM (SELECT {_DID} AS d, {_PEER} AS p FROM generate_series(%(lo)s::int, %(hi)s::int) g) x""",
    # One stored event with one encrypted tag.
    f"""WITH ev AS (
        INSERT INTO messaging_storedevent (public_id, tenant_id, owner_did, sender_did, recipient_did, contract_id,
            timestamp, payload, payload_bytes, encrypted_tags, processed, created_at)
        SELECT gen_random_uuid(), %(t)s, d, p, d, NULL, 1700000000 + g, %(event_payload)s, 200,
            jsonb_build_array(left(replace(encode(sha512(convert_to('t' || d, 'UTF8')), 'base64'), E'\\n', ''), %(tag_len)s)), false, now()
        FROM (SELECT g, {_DID} AS d, {_PEER} AS p FROM generate_series(%(lo)s::int, %(hi)s::int) g) x
        RETURNING id, owner_did, timestamp, encrypted_tags->>0 AS tag
    )
    INSERT INTO messaging_eventtag (tenant_id, owner_did, event_id, tag, timestamp)
    SELECT %(t)s, owner_did, id, tag, timestamp FROM ev""",
    # A DIDComm client: its granted mediation (a did:peer:2 as long as the world's), one recipient DID, and
    # one queued message of ~1 KiB (the queue-depth triggers count it).
    """WITH m AS (
        INSERT INTO didcomm_mediation (tenant_id, client_did, client_hash, state, created_at, updated_at)
        SELECT %(t)s, c, encode(sha256(convert_to(c, 'UTF8')), 'hex'), 'granted', now(), now()
        FROM (SELECT left(%(client)s, length(%(client)s) - 9) || lpad(g::text, 9, '0') AS c
              FROM generate_series(%(lo)s::int, %(hi)s::int) g) x
        RETURNING id, client_did
    ), r AS (
        INSERT INTO didcomm_recipientkey (tenant_id, mediation_id, recipient_did, lookup_hash, created_at, contested,
            proven)
        SELECT %(t)s, id, d, encode(sha256(convert_to(d, 'UTF8')), 'hex'), now(), 0, false
        FROM (SELECT id, left(%(rcpt)s, length(%(rcpt)s) - 9) || right(client_did, 9) AS d FROM m) x
        RETURNING id, mediation_id
    )
    INSERT INTO didcomm_queuedmessage (tenant_id, mediation_id, recipient_id, message_id, data, size, received_at,
        expires_at)
    SELECT %(t)s, mediation_id, id, gen_random_uuid(), %(data)s, length(%(data)s), now(), now() + interval '7 days'
    FROM r""",
]
