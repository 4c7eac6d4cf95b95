from django.apps import AppConfig


class DidcommConfig(AppConfig):
    """The DIDComm v2 front door (issue 15, UC-021): `POST /didcomm`, `/didcomm/ws`, the OOB invitation."""

    name = "apps.didcomm"
    label = "didcomm"
    verbose_name = "DIDComm"

    def ready(self) -> None:
        from django.db.models.signals import post_delete, post_save

        from apps.ops import jobs
        from apps.ops import metrics as ops_metrics
        from apps.tenants.models import Tenant
        from apps.usage import records

        from . import services
        from .jobs import OUTBOUND_PURGE_JOB, PURGE_JOB, SEEN_PRUNE_JOB
        from .models import DidcommPolicy, MediatorIdentity

        # The per-process cache of policies and identities (services.accepting_for) forgets them
        # on any save or delete of what it holds (public URL and grace period live on the tenant).
        for model in (DidcommPolicy, MediatorIdentity, Tenant):
            for name, signal in (("save", post_save), ("delete", post_delete)):
                uid = f"didcomm-cache-{model.__name__}-{name}"
                signal.connect(services.accepting_cache_clear, sender=model, dispatch_uid=uid)

        # Open /didcomm/ws sockets close when DIDComm is switched off (realtime.push.TENANT_STATE_TYPE).
        post_save.connect(services.policy_saved, sender=DidcommPolicy, dispatch_uid="didcomm-policy-state")

        # Like the Decentrl front door: metrics observe every message's record (usage registers
        # metering itself).
        records.subscribe(ops_metrics.observe)
        jobs.register(PURGE_JOB)
        jobs.register(OUTBOUND_PURGE_JOB)
        jobs.register(SEEN_PRUNE_JOB)
        ops_metrics.register_tenant_size(
            "mediator_message_queue_size", "Queued DIDComm messages, per tenant.", services.queue_sizes
        )
