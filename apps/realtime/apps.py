from django.apps import AppConfig
from django.conf import settings


class RealtimeConfig(AppConfig):
    """`/ws` (DCTRL-0004 §10): the consumer, its routing and the per-(tenant, DID) groups."""

    name = "apps.realtime"
    label = "realtime"
    verbose_name = "Real-time delivery"

    def ready(self) -> None:
        from django.db.models.signals import post_delete, post_save

        from apps.messaging.notify import push_requested
        from apps.tenants.models import Tenant

        from .channels_redis_adapter import check_version
        from .push import push_to_sockets, tenant_deleted, tenant_saved

        # The push adapter copies channels_redis internals: refuse to start on a version it was
        # not written for (channels_redis_adapter.PINNED) when the deployment uses that layer.
        backend = settings.CHANNEL_LAYERS.get("default", {}).get("BACKEND", "")
        if backend == "channels_redis.core.RedisChannelLayer":
            check_version()
        # dispatch_uid: ready() may run twice in some test setups; connect exactly once.
        push_requested.connect(push_to_sockets, dispatch_uid="apps.realtime.push_to_sockets")
        # A suspended or deleted tenant's open sockets close (push.TENANT_STATE_TYPE).
        post_save.connect(tenant_saved, sender=Tenant, dispatch_uid="apps.realtime.tenant_saved")
        post_delete.connect(tenant_deleted, sender=Tenant, dispatch_uid="apps.realtime.tenant_deleted")
