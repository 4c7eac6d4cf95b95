from django.apps import AppConfig


class RealtimeConfig(AppConfig):
    """`/ws` (DCTRL-0004 §10): the consumer, its routing and the per-(tenant, DID) groups."""

    name = "apps.realtime"
    label = "realtime"
    verbose_name = "Real-time delivery"

    def ready(self) -> None:
        from apps.messaging.notify import push_requested

        from .push import push_to_sockets

        # dispatch_uid: ready() may run twice in some test setups; connect exactly once.
        push_requested.connect(push_to_sockets, dispatch_uid="apps.realtime.push_to_sockets")
