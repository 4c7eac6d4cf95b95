"""EventTag.timestamp (the event's timestamp, copied) and the covering index `tag_ts`.

QUERY_EVENTS by tag then takes its page order, time range and total from the tag index alone
(apps/messaging/eventquery.py). Existing tag rows are filled from their events before the
column becomes NOT NULL; `tag_ts` replaces `tag_lookup`, whose (tenant, owner_did, tag) prefix
it shares, and is built after the fill.

One transaction that locks messaging_eventtag throughout (its length grows with the tag rows to
fill): SAVE_EVENTS, UPDATE_EVENT_TAGS and tag queries wait meanwhile.
Every filled row leaves a dead version behind: `VACUUM ANALYZE messaging_eventtag` afterwards
(or let autovacuum) so that the tag queries' index-only scans skip the heap again.
"""

from django.db import migrations, models


def fill_timestamps(apps, schema_editor):
    EventTag = apps.get_model("messaging", "EventTag")
    StoredEvent = apps.get_model("messaging", "StoredEvent")
    # One join instead of a correlated sub-select per row (1M rows: seconds, not minutes).
    tags, events = EventTag._meta.db_table, StoredEvent._meta.db_table
    schema_editor.execute(
        f"UPDATE {tags} SET timestamp = e.timestamp FROM {events} e "
        f"WHERE e.id = {tags}.event_id AND {tags}.timestamp IS NULL"
    )


class Migration(migrations.Migration):
    dependencies = [
        ("messaging", "0003_contract_registrations_index"),
    ]

    operations = [
        migrations.AddField(
            model_name="eventtag",
            name="timestamp",
            field=models.BigIntegerField(null=True),
        ),
        migrations.RunPython(fill_timestamps, migrations.RunPython.noop, elidable=False),
        migrations.AlterField(
            model_name="eventtag",
            name="timestamp",
            field=models.BigIntegerField(help_text="the event's timestamp (denormalised for tag_ts)"),
        ),
        migrations.RemoveIndex(
            model_name="eventtag",
            name="tag_lookup",
        ),
        migrations.AddIndex(
            model_name="eventtag",
            index=models.Index(fields=["tenant", "owner_did", "tag", "timestamp", "event"], name="tag_ts"),
        ),
    ]
