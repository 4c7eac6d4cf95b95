"""contract_registrations as (tenant, recipient_did, owner_did, expires_at): a registration check on a
generic plan that picks it looks up one owner instead of ranging over the tenant's live registrations.
Rebuilt concurrently: writes to messaging_contract go on while it builds."""

from django.contrib.postgres.operations import AddIndexConcurrently, RemoveIndexConcurrently
from django.db import migrations, models


class Migration(migrations.Migration):
    atomic = False

    dependencies = [("messaging", "0009_queue_depth_wake")]

    operations = [
        RemoveIndexConcurrently(model_name="contract", name="contract_registrations"),
        AddIndexConcurrently(
            model_name="contract",
            index=models.Index(
                fields=["tenant", "recipient_did", "owner_did", "expires_at"], name="contract_registrations"
            ),
        ),
    ]
