"""A tenant's DIDComm policy: read (created with the defaults on first use), edited, and what its
saves tell the tenant's open sockets."""

from __future__ import annotations

from django.core.exceptions import ValidationError
from django.db import transaction

from apps.realtime.push import tenant_state_on_commit
from apps.tenants.models import Tenant
from apps.tenants.services import Actor, audited_edit

from .models import DidcommPolicy


def policy_for(*, tenant: Tenant) -> DidcommPolicy:
    """The tenant's DIDComm policy, created with the defaults on first use."""
    policy = DidcommPolicy.objects.filter(tenant=tenant).first()
    if policy is None:
        # Two first uses racing: the primary key decides, the loser reads the winner's row.
        policy, _ = DidcommPolicy.objects.get_or_create(tenant=tenant)
    return policy


@transaction.atomic
def policy_update(*, tenant: Tenant, actor: Actor, **changes) -> DidcommPolicy:
    """Edit the tenant's DIDComm policy (the fields of `DidcommPolicy.EDITABLE`), validated by the
    model's bounds; audited as `didcomm.update_policy` with the changed fields before and after."""
    unknown = sorted(set(changes) - set(DidcommPolicy.EDITABLE))
    if unknown:
        raise ValidationError({name: ["Unknown field."] for name in unknown})
    # The policy row lock serialises edits with grants (mediation_request locks it too).
    policy = DidcommPolicy.objects.select_for_update().get(pk=policy_for(tenant=tenant).pk)
    return audited_edit(
        actor=actor,
        action="didcomm.update_policy",
        tenant=tenant,
        row=policy,
        changes=changes,
        check=lambda row: row.full_clean(exclude=["tenant"]),
    )


def policy_saved(
    sender, instance: DidcommPolicy, created: bool = False, raw: bool = False, update_fields=None, **kwargs
) -> None:
    """DidcommPolicy post_save (apps.py): the tenant's sockets learn after commit whether DIDComm is
    still on (a `/didcomm/ws` socket closes when it is off; `/ws` ignores it). Only a save that can
    switch it: not the first use's row, not an edit of other fields."""
    if created or raw or (update_fields is not None and "enabled" not in update_fields):
        return
    tenant_state_on_commit(tenant_id=instance.tenant_id, state={"didcomm": instance.enabled})
