"""One queue for both protocols, or two? A model of the question in issue 44 (docs/benchmarks.md,
"One queue for both protocols").

    python -m bench.queue_model                  # 3 rounds of 8 s per variant, 500k rows per protocol
    python -m bench.queue_model --quick          # 1 round of 4 s, 100k rows per protocol

Today Decentrl's pending events (`messaging_pendingevent`) and DIDComm's queued messages
(`didcomm_queuedmessage`) are two tables. The alternative is one table in messaging serving both:
it may not reference DIDComm's tables (layering), so a DIDComm row names its client and recipient
by text keys, as presence and wake rows already do (`didcomm:<client hash>`), and each protocol's
reads get partial indexes of their own. This model builds both layouts side by side in a scratch
database, with each protocol's indexes as the real tables have them (migrations of both apps), and
runs each protocol's steady-state transaction against each layout with pgbench, alternately:

- Decentrl: store one pending event for a random recipient; read a recipient's first 10
  unacknowledged; acknowledge its oldest (the payload dropped, the row kept, as ACKNOWLEDGE does);
- DIDComm: store one message for a random client's recipient; read the client's first 10;
  delete its oldest (messages-received).

The unified table holds both protocols' rows (as it would), each current table only its own. What
the model leaves out costs the same in both layouts: the queue-depth triggers, the presence row
lock, the cap, the envelope's parsing and signature checks. Results under bench/results/queue-model-*.
"""

from __future__ import annotations

import argparse
import re
import statistics
import subprocess
import tempfile
from pathlib import Path

import psycopg

from bench import write_results
from bench.pg import PG_ADMIN_URL, db_url
from bench.run_standard import machine

DB = "bench_queue_model"
PGBENCH = next(iter(sorted(Path("/usr/lib/postgresql").glob("*/bin/pgbench"))), Path("pgbench"))

SCHEMA = """
CREATE EXTENSION IF NOT EXISTS pgcrypto;
-- Today: Decentrl's pending events (messaging 0001/0010) ...
CREATE TABLE pe (id bigserial PRIMARY KEY, public_id uuid NOT NULL UNIQUE, tenant_id int NOT NULL,
  recipient_did varchar(2048) NOT NULL, sender_did varchar(2048) NOT NULL, payload text NOT NULL,
  payload_bytes int NOT NULL, created_at timestamptz NOT NULL, acknowledged_at timestamptz);
CREATE INDEX pe_unacked ON pe (tenant_id, recipient_did, id) WHERE acknowledged_at IS NULL;
CREATE INDEX pe_unacked_sender ON pe (tenant_id, recipient_did, sender_did, id) WHERE acknowledged_at IS NULL;
CREATE INDEX pe_created ON pe (created_at);
-- ... and DIDComm's queued messages (didcomm 0001/0007), keyed by its own tables' ids.
CREATE TABLE dq (id bigserial PRIMARY KEY, tenant_id int NOT NULL, mediation_id bigint NOT NULL,
  recipient_id bigint, message_id uuid NOT NULL UNIQUE, data text NOT NULL, size int NOT NULL,
  received_at timestamptz NOT NULL, expires_at timestamptz NOT NULL);
CREATE INDEX dq_client ON dq (mediation_id, id);
CREATE INDEX dq_recipient ON dq (recipient_id, id);
CREATE INDEX dq_expiry ON dq (expires_at);
-- One queue in messaging: text keys (the subject is the presence row's key), partial indexes.
CREATE TABLE uq (id bigserial PRIMARY KEY, public_id uuid NOT NULL UNIQUE, tenant_id int NOT NULL,
  subject varchar(2048) NOT NULL, recipient varchar(2048), sender_did varchar(2048), body text NOT NULL,
  size int NOT NULL, created_at timestamptz NOT NULL, expires_at timestamptz NOT NULL,
  acknowledged_at timestamptz);
CREATE INDEX uq_unacked ON uq (tenant_id, subject, id) WHERE acknowledged_at IS NULL;
CREATE INDEX uq_unacked_sender ON uq (tenant_id, subject, sender_did, id)
  WHERE acknowledged_at IS NULL AND sender_did IS NOT NULL;
CREATE INDEX uq_recipient ON uq (tenant_id, subject, recipient, id) WHERE recipient IS NOT NULL;
CREATE INDEX uq_expiry ON uq (expires_at);
-- One queue in messaging keyed by ids: the subject is its presence row's id (messaging's own
-- table, which both protocols' stores already read under a lock), a DIDComm recipient its key's id.
CREATE TABLE iq (id bigserial PRIMARY KEY, public_id uuid NOT NULL UNIQUE, subject_id bigint NOT NULL,
  recipient_id bigint, sender_did varchar(2048), body text NOT NULL, size int NOT NULL,
  created_at timestamptz NOT NULL, expires_at timestamptz NOT NULL, acknowledged_at timestamptz);
CREATE INDEX iq_unacked ON iq (subject_id, id) WHERE acknowledged_at IS NULL;
CREATE INDEX iq_unacked_sender ON iq (subject_id, sender_did, id)
  WHERE acknowledged_at IS NULL AND sender_did IS NOT NULL;
CREATE INDEX iq_recipient ON iq (subject_id, recipient_id, id) WHERE recipient_id IS NOT NULL;
CREATE INDEX iq_expiry ON iq (expires_at);
"""

# Keys shaped like the real ones: a did:decentrl (~57 characters), a DIDComm client's hash key
# (`didcomm:` + 64 hex) and a did:peer:2 recipient (~180 characters).
# (chr(58) is ':', which pgbench would read as a variable in a script.)
DID = "'did' || chr(58) || 'decentrl' || chr(58) || 'z6Mk' || md5(({n})::text) || 'abcdefgh'"
CLIENT = "'didcomm' || chr(58) || encode(sha256((({n})::text)::bytea), 'hex')"
PEER = "'did' || chr(58) || 'peer' || chr(58) || '2.Ez6LS' || repeat(md5(({n})::text), 5)"

SEED = {
    "pe": f"""INSERT INTO pe (public_id, tenant_id, recipient_did, sender_did, payload, payload_bytes, created_at)
      SELECT gen_random_uuid(), 1, {DID.format(n="g % :subjects")}, {DID.format(n="1000000 + g % 1000")},
             repeat('p', 700), 700, now() FROM generate_series(1, :rows) g""",
    "dq": """INSERT INTO dq (tenant_id, mediation_id, recipient_id, message_id, data, size, received_at, expires_at)
      SELECT 1, g % :subjects, g % :subjects, gen_random_uuid(), repeat('d', 1000), 1000, now(),
             now() + interval '3 days' FROM generate_series(1, :rows) g""",
    "uq": f"""INSERT INTO uq (public_id, tenant_id, subject, recipient, sender_did, body, size, created_at, expires_at)
      SELECT gen_random_uuid(), 1, {DID.format(n="g % :subjects")}, NULL, {DID.format(n="1000000 + g % 1000")},
             repeat('p', 700), 700, now(), now() + interval '3 days' FROM generate_series(1, :rows) g
      UNION ALL
      SELECT gen_random_uuid(), 1, {CLIENT.format(n="g % :subjects")}, {PEER.format(n="g % :subjects")}, NULL,
             repeat('d', 1000), 1000, now(), now() + interval '3 days' FROM generate_series(1, :rows) g""",
    "iq": f"""INSERT INTO iq (public_id, subject_id, recipient_id, sender_did, body, size, created_at, expires_at)
      SELECT gen_random_uuid(), g % :subjects, NULL, {DID.format(n="1000000 + g % 1000")},
             repeat('p', 700), 700, now(), now() + interval '3 days' FROM generate_series(1, :rows) g
      UNION ALL
      SELECT gen_random_uuid(), :subjects + g % :subjects, g % :subjects, NULL,
             repeat('d', 1000), 1000, now(), now() + interval '3 days' FROM generate_series(1, :rows) g""",
}

# Each protocol's steady-state transaction on each layout (pgbench scripts).
PICK = "\\set s random(0, :subjects - 1)\n\\set r random(0, :subjects - 1)\n\\set sd :subjects + :s\n\\set rd :subjects + :r\n"
SCRIPTS = {
    ("decentrl", "today"): PICK
    + f"""BEGIN;
INSERT INTO pe (public_id, tenant_id, recipient_did, sender_did, payload, payload_bytes, created_at)
  VALUES (gen_random_uuid(), 1, {DID.format(n=":s")}, {DID.format(n=":r + 1000000")}, repeat('p', 700), 700, now());
SELECT public_id, sender_did, payload FROM pe WHERE tenant_id = 1 AND recipient_did = {DID.format(n=":r")}
  AND acknowledged_at IS NULL ORDER BY id LIMIT 10;
UPDATE pe SET acknowledged_at = now(), payload = '' WHERE id = (SELECT id FROM pe WHERE tenant_id = 1
  AND recipient_did = {DID.format(n=":r")} AND acknowledged_at IS NULL ORDER BY id LIMIT 1);
END;
""",
    ("decentrl", "one queue"): PICK
    + f"""BEGIN;
INSERT INTO uq (public_id, tenant_id, subject, recipient, sender_did, body, size, created_at, expires_at)
  VALUES (gen_random_uuid(), 1, {DID.format(n=":s")}, NULL, {DID.format(n=":r + 1000000")}, repeat('p', 700), 700, now(),
          now() + interval '3 days');
SELECT public_id, sender_did, body FROM uq WHERE tenant_id = 1 AND subject = {DID.format(n=":r")}
  AND acknowledged_at IS NULL ORDER BY id LIMIT 10;
UPDATE uq SET acknowledged_at = now(), body = '' WHERE id = (SELECT id FROM uq WHERE tenant_id = 1
  AND subject = {DID.format(n=":r")} AND acknowledged_at IS NULL ORDER BY id LIMIT 1);
END;
""",
    ("decentrl", "one queue, ids"): PICK
    + f"""BEGIN;
INSERT INTO iq (public_id, subject_id, recipient_id, sender_did, body, size, created_at, expires_at)
  VALUES (gen_random_uuid(), :s, NULL, {DID.format(n=":r + 1000000")}, repeat('p', 700), 700, now(),
          now() + interval '3 days');
SELECT public_id, sender_did, body FROM iq WHERE subject_id = :r AND acknowledged_at IS NULL ORDER BY id LIMIT 10;
UPDATE iq SET acknowledged_at = now(), body = '' WHERE id = (SELECT id FROM iq WHERE subject_id = :r
  AND acknowledged_at IS NULL ORDER BY id LIMIT 1);
END;
""",
    ("didcomm", "today"): PICK
    + """BEGIN;
INSERT INTO dq (tenant_id, mediation_id, recipient_id, message_id, data, size, received_at, expires_at)
  VALUES (1, :s, :s, gen_random_uuid(), repeat('d', 1000), 1000, now(), now() + interval '3 days');
SELECT message_id, data FROM dq WHERE mediation_id = :r ORDER BY id LIMIT 10;
DELETE FROM dq WHERE id = (SELECT id FROM dq WHERE mediation_id = :r ORDER BY id LIMIT 1);
END;
""",
    ("didcomm", "one queue"): PICK
    + f"""BEGIN;
INSERT INTO uq (public_id, tenant_id, subject, recipient, sender_did, body, size, created_at, expires_at)
  VALUES (gen_random_uuid(), 1, {CLIENT.format(n=":s")}, {PEER.format(n=":s")}, NULL, repeat('d', 1000), 1000, now(),
          now() + interval '3 days');
SELECT public_id, body FROM uq WHERE tenant_id = 1 AND subject = {CLIENT.format(n=":r")}
  AND acknowledged_at IS NULL ORDER BY id LIMIT 10;
DELETE FROM uq WHERE id = (SELECT id FROM uq WHERE tenant_id = 1 AND subject = {CLIENT.format(n=":r")}
  AND acknowledged_at IS NULL ORDER BY id LIMIT 1);
END;
""",
    ("didcomm", "one queue, ids"): PICK
    + """BEGIN;
INSERT INTO iq (public_id, subject_id, recipient_id, sender_did, body, size, created_at, expires_at)
  VALUES (gen_random_uuid(), :sd, :s, NULL, repeat('d', 1000), 1000, now(), now() + interval '3 days');
SELECT public_id, body FROM iq WHERE subject_id = :rd AND acknowledged_at IS NULL ORDER BY id LIMIT 10;
DELETE FROM iq WHERE id = (SELECT id FROM iq WHERE subject_id = :rd AND acknowledged_at IS NULL
  ORDER BY id LIMIT 1);
END;
""",
}
LAYOUTS = ("today", "one queue", "one queue, ids")


def build(rows: int, subjects: int) -> None:
    """A fresh scratch database with both layouts seeded and analysed."""
    with psycopg.connect(PG_ADMIN_URL, autocommit=True) as admin:
        admin.execute(f"DROP DATABASE IF EXISTS {DB} WITH (FORCE)")
        admin.execute(f"CREATE DATABASE {DB}")
    with psycopg.connect(db_url(DB), autocommit=True) as conn:
        conn.execute(SCHEMA)
        for sql in SEED.values():
            conn.execute(sql.replace(":rows", str(rows)).replace(":subjects", str(subjects)))
        conn.execute("VACUUM ANALYZE")


def run(protocol: str, layout: str, seconds: int, clients: int, subjects: int) -> float:
    """Transactions per second of one protocol's script on one layout."""
    with tempfile.NamedTemporaryFile("w", suffix=".sql", delete=False) as fh:
        fh.write(SCRIPTS[(protocol, layout)])
    out = subprocess.run(
        [str(PGBENCH), "-n", "-M", "prepared", "-c", str(clients), "-j", str(min(clients, 2)), "-T", str(seconds),
         "-D", f"subjects={subjects}", "-f", fh.name, db_url(DB)],
        capture_output=True, text=True, check=True,
    ).stdout  # fmt: skip
    Path(fh.name).unlink()
    return float(re.search(r"tps = ([0-9.]+)", out).group(1))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--rows", type=int, default=500_000, help="rows per protocol seeded first")
    parser.add_argument("--subjects", type=int, default=50_000, help="recipients (Decentrl) and clients (DIDComm)")
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--seconds", type=int, default=8)
    parser.add_argument("--clients", type=int, default=4)
    parser.add_argument("--quick", action="store_true", help="1 round of 4 s over 100k rows per protocol")
    args = parser.parse_args()
    if args.quick:
        args.rows, args.subjects, args.rounds, args.seconds = 100_000, 10_000, 1, 4
    build(args.rows, args.subjects)
    tps: dict[tuple[str, str], list[float]] = {key: [] for key in SCRIPTS}
    for key in SCRIPTS:  # a warm-up of each, not counted
        run(*key, 1, args.clients, args.subjects)
    for i in range(args.rounds):
        layouts = LAYOUTS if i % 2 == 0 else LAYOUTS[::-1]
        for protocol in ("decentrl", "didcomm"):
            for layout in layouts:
                tps[(protocol, layout)].append(run(protocol, layout, args.seconds, args.clients, args.subjects))
    lines = [
        "| protocol | layout | tx/s (per round) | / today, median (per round) |",
        "|---|---|---|---|",
    ]
    summary: dict = {"machine": machine(), "args": vars(args), "tps": {}}
    for protocol in ("decentrl", "didcomm"):
        today = tps[(protocol, "today")]
        for layout in LAYOUTS:
            got = tps[(protocol, layout)]
            ratios = [g / t for g, t in zip(got, today, strict=True)]
            summary["tps"][f"{protocol}, {layout}"] = {"tps": got, "ratios": ratios}
            ratio = (
                ""
                if layout == "today"
                else f"**{statistics.median(ratios):.2f}** ({', '.join(f'{r:.2f}' for r in ratios)})"
            )
            lines.append(f"| {protocol} | {layout} | {', '.join(f'{g:,.0f}' for g in got)} | {ratio} |")
    with psycopg.connect(db_url(DB)) as conn:
        sizes = conn.execute(
            "SELECT relname, pg_total_relation_size(oid) FROM pg_class WHERE relname IN ('pe', 'dq', 'uq', 'iq')"
        ).fetchall()
    summary["bytes"] = dict(sizes)
    lines.append("")
    lines.append("sizes after the run: " + ", ".join(f"{name} {size / 2**20:,.0f} MiB" for name, size in sorted(sizes)))
    write_results("queue-model", summary, lines)


if __name__ == "__main__":
    main()
