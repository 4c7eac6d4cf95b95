from django.apps import AppConfig


class UsageConfig(AppConfig):
    name = "apps.usage"
    label = "usage"
    verbose_name = "Usage"
    default_auto_field = "django.db.models.BigAutoField"

    def ready(self) -> None:
        from django.conf import settings

        from apps.protocol import hooks

        from . import metering

        # Metering sees every finished command of the one dispatch path (HTTP and WebSocket).
        if settings.USAGE_METERING_MODE != "off" and metering.observe not in hooks.OBSERVERS:
            hooks.OBSERVERS.append(metering.observe)
