"""The queue-depth triggers of 0005 no longer create a row for a decrement (issue 8).

A tenant's deletion removes its counter rows and its pending events in whatever order Django's
collector picks. If the counter rows went first, 0005's upsert turned the events' DELETE into a
new row with a negative depth for the departing tenant, which the deferred foreign key then
refused at commit. A decrement now only updates a row that exists; increments still create it.
"""

from django.db import migrations

_UPSERT = """
    INSERT INTO messaging_pendingqueuedepth (tenant_id, recipient_did, depth)
    SELECT c.tenant_id, c.recipient_did, c.delta FROM (
        SELECT tenant_id, recipient_did, sum(delta) AS delta FROM ({rows}) AS changes
        GROUP BY tenant_id, recipient_did HAVING sum(delta) <> 0
    ) AS c
    WHERE c.delta > 0 OR EXISTS (
        SELECT 1 FROM messaging_pendingqueuedepth d WHERE d.tenant_id = c.tenant_id AND d.recipient_did = c.recipient_did
    )
    ON CONFLICT (tenant_id, recipient_did)
    DO UPDATE SET depth = messaging_pendingqueuedepth.depth + EXCLUDED.depth;
"""
_NEW = "SELECT tenant_id, recipient_did, 1 AS delta FROM new_rows WHERE acknowledged_at IS NULL"
_OLD = "SELECT tenant_id, recipient_did, -1 AS delta FROM old_rows WHERE acknowledged_at IS NULL"

FUNCTIONS = f"""
CREATE OR REPLACE FUNCTION messaging_queue_depth_insert() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN {_UPSERT.format(rows=_NEW)} RETURN NULL; END $$;
CREATE OR REPLACE FUNCTION messaging_queue_depth_update() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN {_UPSERT.format(rows=_NEW + " UNION ALL " + _OLD)} RETURN NULL; END $$;
CREATE OR REPLACE FUNCTION messaging_queue_depth_delete() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN {_UPSERT.format(rows=_OLD)} RETURN NULL; END $$;
"""


def replace_functions(apps, schema_editor):
    schema_editor.execute(FUNCTIONS)


class Migration(migrations.Migration):
    dependencies = [("messaging", "0005_pending_queue_depth")]

    # Backwards: 0005's functions come back with 0005's own reversal (this one keeps them).
    operations = [migrations.RunPython(replace_functions, migrations.RunPython.noop)]
