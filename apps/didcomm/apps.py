from django.apps import AppConfig


class DidcommConfig(AppConfig):
    """The DIDComm v2 front door (UC-021): `POST /didcomm`, `/didcomm/ws`, the OOB invitation."""

    name = "apps.didcomm"
    label = "didcomm"
    verbose_name = "DIDComm"

    def ready(self) -> None:
        from django.db.models.signals import post_save

        from apps.ops import jobs
        from apps.ops import metrics as ops_metrics
        from apps.tenants.models import Tenant
        from apps.usage import records
        from apps.usage import selectors as usage_selectors

        from . import selectors
        from .identity import ACCEPTING
        from .jobs import OUTBOUND_PURGE_JOB, PURGE_JOB, SEEN_PRUNE_JOB
        from .models import DidcommPolicy, MediatorIdentity
        from .policy import policy_saved
        from .queue import queue_sizes

        # The per-process cache of policies and identities (identity.accepting_for) forgets them
        # on any save or delete of what it holds (public URL and grace period live on the tenant).
        ACCEPTING.clear_on_change(DidcommPolicy, MediatorIdentity, Tenant)

        # Open /didcomm/ws sockets close when DIDComm is switched off (realtime.push.TENANT_STATE_TYPE).
        post_save.connect(policy_saved, sender=DidcommPolicy, dispatch_uid="didcomm-policy-state")

        # Like the Decentrl front door: metrics observe every message's record (usage registers
        # metering itself).
        records.subscribe(ops_metrics.observe)
        jobs.register(PURGE_JOB)
        jobs.register(OUTBOUND_PURGE_JOB)
        jobs.register(SEEN_PRUNE_JOB)
        usage_selectors.QUEUE_COUNTERS["didcomm"] = selectors.queued_by_tenant
        ops_metrics.register_tenant_size(
            "mediator_message_queue_size", "Queued DIDComm messages, per tenant.", queue_sizes
        )
