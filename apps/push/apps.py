from django.apps import AppConfig


class PushConfig(AppConfig):
    """Wake-up pushes to phones whose sockets sleep (docs/push.md): devices, providers, the wake
    task. Messaging's storing statements decide when a wake is due and announce it
    (`messaging.notify.wake_due`); this app's receiver claims it and queues the send. Ended subjects' devices go with them."""

    name = "apps.push"
    label = "push"
    verbose_name = "Push"
    default_auto_field = "django.db.models.BigAutoField"

    def ready(self) -> None:
        from apps.tenants.models import Tenant

        from . import receivers
        from .models import PushPolicy, PushProvider
        from .services import POLICIES, SENDERS

        receivers.connect()
        POLICIES.clear_on_change(PushPolicy)
        SENDERS.clear_on_change(PushProvider, Tenant)
