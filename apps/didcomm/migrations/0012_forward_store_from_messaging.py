"""The forward's function from its one text in code, FORWARD_FUNCTION (apps/didcomm/forward.py;
apps/messaging/sql.py when this migration was written).

The same function as 0008 (only a comment of its body changed). A later change of the text is a new
migration like this one, with the text's new hash: tests/didcomm/app/test_forward_storage.py
checks that the latest such migration names the code's text.
"""

import importlib

from django.db import migrations

from apps.didcomm.forward import FORWARD_FUNCTION

FORWARD_FUNCTION_SHA256 = "765beb4d8db27bd1f45f29132641de6b4fabedd85b4e66e1f446e206b4a2fd0e"


def forward(apps, schema_editor):
    # The code's text may return another row type than 0008's function (0016 changed it), which
    # CREATE OR REPLACE cannot change: a fresh database gets the code's function here at once.
    previous = importlib.import_module("apps.didcomm.migrations.0008_forward_store_presence")
    schema_editor.execute(f"DROP FUNCTION IF EXISTS {previous.SIGNATURE}")
    schema_editor.execute(FORWARD_FUNCTION)


def backward(apps, schema_editor):
    previous = importlib.import_module("apps.didcomm.migrations.0008_forward_store_presence")
    schema_editor.execute(f"DROP FUNCTION {previous.SIGNATURE}")
    schema_editor.execute(previous.CREATE_FUNCTION)


class Migration(migrations.Migration):
    dependencies = [("didcomm", "0011_recipient_proof")]

    operations = [migrations.RunPython(forward, backward)]
