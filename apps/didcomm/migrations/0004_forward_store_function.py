# Written by hand: the PostgreSQL function behind apps/didcomm/storage.py's one-round-trip forward,
# tested against one oracle in tests/didcomm/app/test_forward_storage.py. A change of the rule is a
# new migration replacing the function.

from django.db import migrations

# Each statement of a VOLATILE plpgsql function takes a new snapshot (READ COMMITTED): the count
# that follows the recipient row lock sees every message committed by whoever held the lock before,
# so the cap holds exactly under concurrent forwards.
CREATE_FUNCTION = """
CREATE OR REPLACE FUNCTION didcomm_forward_store(
    p_tenant bigint, p_lookup varchar, p_cap integer, p_reject boolean, p_message_id uuid,
    p_data text, p_now timestamptz, p_expires timestamptz, p_outbound boolean
) RETURNS TABLE (o_outcome text, o_evicted integer, o_client_did text, o_outbound_id bigint)
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
BEGIN
    SELECT r.id, r.mediation_id, m.client_did, m.connection_id, c.endpoint
      INTO v_recipient, v_mediation, v_client, v_connection, v_endpoint
      FROM didcomm_recipientkey r
      JOIN didcomm_mediation m ON m.id = r.mediation_id
      LEFT JOIN didcomm_connection c ON c.id = m.connection_id
     WHERE r.tenant_id = p_tenant AND r.lookup_hash = p_lookup AND m.state = 'granted'
       FOR UPDATE OF r;
    IF NOT FOUND THEN
        RETURN QUERY SELECT 'unknown'::text, 0, NULL::text, NULL::bigint;
        RETURN;
    END IF;
    SELECT count(*) INTO v_depth FROM didcomm_queuedmessage WHERE recipient_id = v_recipient;
    IF v_depth >= p_cap THEN
        IF p_reject THEN
            RETURN QUERY SELECT 'full'::text, 0, NULL::text, NULL::bigint;
            RETURN;
        END IF;
        -- UC-021 AF-4: FIFO eviction, the oldest first.
        DELETE FROM didcomm_queuedmessage WHERE id IN (
            SELECT q.id FROM didcomm_queuedmessage q WHERE q.recipient_id = v_recipient
             ORDER BY q.id LIMIT v_depth - p_cap + 1);
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
    RETURN QUERY SELECT 'stored'::text, v_evicted, v_client, v_outbound;
END $$;
"""

DROP_FUNCTION = (
    "DROP FUNCTION didcomm_forward_store(bigint, varchar, integer, boolean, uuid, text, timestamptz, timestamptz, boolean);"
)


def create_function(apps, schema_editor):
    schema_editor.execute(CREATE_FUNCTION)


def drop_function(apps, schema_editor):
    schema_editor.execute(DROP_FUNCTION)


class Migration(migrations.Migration):
    dependencies = [("didcomm", "0003_merge_0002_policy_bounds_0002_v1_connections")]

    operations = [migrations.RunPython(create_function, drop_function)]
