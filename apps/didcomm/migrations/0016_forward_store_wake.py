"""The forward's function also reads its client's wake state (apps/messaging/wake.py): it returns
one code for presence and wake (`o_state`, apps/messaging/presence.py STATE_SQL) instead of
`o_live`, and the client's key (`o_subject`) for the wake announced after commit. The return type
changed, so the function is dropped and created again from its one text in code
(FORWARD_FUNCTION, apps/didcomm/forward.py).
"""

import importlib

from django.db import migrations

from apps.didcomm.forward import FORWARD_FUNCTION

FORWARD_FUNCTION_SHA256 = "bcee4bac997da733b0b1b908c0f637c9687d9c34e265e3caaa1985c9a507a29f"

SIGNATURE = "didcomm_forward_store(bigint, varchar, integer, boolean, uuid, text, timestamptz, timestamptz, boolean)"


def forward(apps, schema_editor):
    schema_editor.execute(f"DROP FUNCTION {SIGNATURE}")
    schema_editor.execute(FORWARD_FUNCTION)


def backward(apps, schema_editor):
    previous = importlib.import_module("apps.didcomm.migrations.0008_forward_store_presence")
    schema_editor.execute(f"DROP FUNCTION {SIGNATURE}")
    schema_editor.execute(previous.CREATE_FUNCTION)


class Migration(migrations.Migration):
    dependencies = [("didcomm", "0015_seen_message_expiry_in_ms"), ("messaging", "0009_queue_depth_wake")]

    operations = [migrations.RunPython(forward, backward)]
