"""The forward's function also returns whether the recipient's client may have a live socket (`o_live`).

A forward is pushed only to a client that may be live (apps/messaging/presence.py): the function
reads the client's presence row (`messaging_pendingqueuedepth` for (tenant, `didcomm:<client_hash>`),
apps.didcomm.models.presence_key, which `/didcomm/ws` sockets in live mode mark) under a share lock after storing the message, so that a
socket going live while the message is stored either waits for its commit and finds it in its
backlog, or is read here. A missing row is made first, with nobody live (a socket's write then
waits for this commit as well), so a client without a live socket is never woken. A function's result
type cannot change in place: it is dropped and created again, inside this migration's transaction.
"""

import importlib

from django.db import migrations

SIGNATURE = "didcomm_forward_store(bigint, varchar, integer, boolean, uuid, text, timestamptz, timestamptz, boolean)"

CREATE_FUNCTION = """CREATE FUNCTION didcomm_forward_store(
    p_tenant bigint, p_lookup varchar, p_cap integer, p_reject boolean, p_message_id uuid,
    p_data text, p_now timestamptz, p_expires timestamptz, p_outbound boolean
) RETURNS TABLE (o_outcome text, o_evicted integer, o_client_did text, o_outbound_id bigint, o_live boolean)
LANGUAGE plpgsql VOLATILE AS $$
DECLARE
    v_recipient bigint;
    v_mediation bigint;
    v_client text;
    v_connection bigint;
    v_endpoint text;
    v_depth bigint;
    v_evicted integer := 0;
    v_queued bigint;
    v_outbound bigint;
    v_presence text;
    v_live boolean;
BEGIN
    SELECT r.id, r.mediation_id, m.client_did, 'didcomm:' || m.client_hash, m.connection_id, c.endpoint
      INTO v_recipient, v_mediation, v_client, v_presence, v_connection, v_endpoint
      FROM didcomm_recipientkey r
      JOIN didcomm_mediation m ON m.id = r.mediation_id
      LEFT JOIN didcomm_connection c ON c.id = m.connection_id
     WHERE r.tenant_id = p_tenant AND r.lookup_hash = p_lookup AND m.state = 'granted'
       FOR UPDATE OF r;
    IF NOT FOUND THEN
        RETURN QUERY SELECT 'unknown'::text, 0, NULL::text, NULL::bigint, NULL::boolean;
        RETURN;
    END IF;
    SELECT d.depth INTO v_depth FROM didcomm_queuedepth d WHERE d.recipient_id = v_recipient;
    v_depth := coalesce(v_depth, 0);
    IF v_depth >= p_cap THEN
        IF p_reject THEN
            RETURN QUERY SELECT 'full'::text, 0, NULL::text, NULL::bigint, NULL::boolean;
            RETURN;
        END IF;
        -- UC-021 AF-4: FIFO eviction, the oldest first, with their v1 outbound rows (as Django's
        -- cascade does for SqlForwardStore; the foreign key has no ON DELETE of its own).
        WITH gone AS (
            SELECT q.id FROM didcomm_queuedmessage q WHERE q.recipient_id = v_recipient
             ORDER BY q.id LIMIT v_depth - p_cap + 1
        ), outbound AS (
            DELETE FROM didcomm_outbound WHERE queued_id IN (SELECT id FROM gone)
        )
        DELETE FROM didcomm_queuedmessage WHERE id IN (SELECT id FROM gone);
        GET DIAGNOSTICS v_evicted = ROW_COUNT;
    END IF;
    INSERT INTO didcomm_queuedmessage
        (tenant_id, mediation_id, recipient_id, message_id, data, size, received_at, expires_at)
    VALUES (p_tenant, v_mediation, v_recipient, p_message_id, p_data, length(p_data), p_now, p_expires)
    RETURNING id INTO v_queued;
    IF p_outbound AND v_connection IS NOT NULL AND coalesce(v_endpoint, '') <> '' THEN
        INSERT INTO didcomm_outbound
            (tenant_id, connection_id, queued_id, body, attempts, last_status, next_attempt_at, expires_at, created_at)
        VALUES (p_tenant, v_connection, v_queued, '', 0, '', p_now, p_expires, p_now)
        RETURNING id INTO v_outbound;
    END IF;
    -- The client's presence (apps/messaging/presence.py), read under its row's share lock: a socket
    -- marking the client present waits for this commit, and one that marked it first is read here.
    -- A missing row is made with nobody live (a socket's write then waits for this commit too).
    SELECT d.live > 0 AND d.live_until > extract(epoch FROM p_now)::bigint INTO v_live
      FROM messaging_pendingqueuedepth d WHERE d.tenant_id = p_tenant AND d.recipient_did = v_presence FOR SHARE;
    IF NOT FOUND THEN
        INSERT INTO messaging_pendingqueuedepth (tenant_id, recipient_did, depth) VALUES (p_tenant, v_presence, 0)
            ON CONFLICT (tenant_id, recipient_did) DO NOTHING;
        SELECT d.live > 0 AND d.live_until > extract(epoch FROM p_now)::bigint INTO v_live
          FROM messaging_pendingqueuedepth d WHERE d.tenant_id = p_tenant AND d.recipient_did = v_presence FOR SHARE;
    END IF;
    RETURN QUERY SELECT 'stored'::text, v_evicted, v_client, v_outbound, v_live;
END $$;
"""


def forward(apps, schema_editor):
    schema_editor.execute(f"DROP FUNCTION {SIGNATURE}")
    schema_editor.execute(CREATE_FUNCTION)


def backward(apps, schema_editor):
    previous = importlib.import_module("apps.didcomm.migrations.0005_queue_depth")
    schema_editor.execute(f"DROP FUNCTION {SIGNATURE}")
    schema_editor.execute(previous.CREATE_FUNCTION)


class Migration(migrations.Migration):
    dependencies = [
        ("didcomm", "0007_queue_lean_writes"),
        ("messaging", "0008_queue_depth_presence"),
    ]

    operations = [migrations.RunPython(forward, backward)]
