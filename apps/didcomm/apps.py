from django.apps import AppConfig


class DidcommConfig(AppConfig):
    """The DIDComm v2 front door (issue 15, UC-021): `POST /didcomm`, `/didcomm/ws`, the OOB invitation."""

    name = "apps.didcomm"
    label = "didcomm"
    verbose_name = "DIDComm"

    def ready(self) -> None:
        from django.conf import settings

        from apps.ops import jobs
        from apps.ops import metrics as ops_metrics
        from apps.usage import metering

        from . import hooks, metrics, services
        from .jobs import OUTBOUND_PURGE_JOB, PURGE_JOB

        # Like the Decentrl front door: plug metering and metrics into our own observer list,
        # exactly once (ready() may run more than once in some test setups).
        observers = [metrics.observe_message]
        if settings.USAGE_METERING_MODE != "off":
            observers.append(metering.observe)
        for fn in observers:
            if fn not in hooks.OBSERVERS:
                hooks.OBSERVERS.append(fn)
        jobs.register(PURGE_JOB)
        jobs.register(OUTBOUND_PURGE_JOB)
        ops_metrics.register_tenant_size(
            "mediator_message_queue_size", "Queued DIDComm messages, per tenant.", services.queue_sizes
        )
