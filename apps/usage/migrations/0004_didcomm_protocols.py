"""Each DIDComm version is its own protocol: v2 rows (metered as "didcomm") become "didcomm-v2",
v1 rows (metered as "decentrl", their channel "didcomm-v1") become "didcomm-v1". Published report
rows named "didcomm" are renamed alike; their v1 rows cannot be told apart any more and stay."""

from django.db import migrations


def forwards(apps, schema_editor):
    CommandMeter = apps.get_model("usage", "CommandMeter")
    ReportCommandType = apps.get_model("usage", "ReportCommandType")
    for channel in ("didcomm-v2", "didcomm-v1"):
        CommandMeter.objects.filter(channel=channel).exclude(protocol=channel).update(protocol=channel)
    ReportCommandType.objects.filter(protocol="didcomm").update(protocol="didcomm-v2")


def backwards(apps, schema_editor):
    CommandMeter = apps.get_model("usage", "CommandMeter")
    ReportCommandType = apps.get_model("usage", "ReportCommandType")
    CommandMeter.objects.filter(channel="didcomm-v2").update(protocol="didcomm")
    CommandMeter.objects.filter(channel="didcomm-v1").update(protocol="decentrl")
    ReportCommandType.objects.filter(protocol="didcomm-v2").update(protocol="didcomm")


class Migration(migrations.Migration):
    dependencies = [("usage", "0003_protocol_progress_cancel")]

    operations = [migrations.RunPython(forwards, backwards)]
