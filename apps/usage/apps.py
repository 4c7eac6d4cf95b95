from django.apps import AppConfig


class UsageConfig(AppConfig):
    """Command metering, usage report runs and the staff dashboard. Metering observes every
    front door's request records (`records`), unless USAGE_METERING_MODE is "off"."""

    name = "apps.usage"
    label = "usage"
    verbose_name = "Usage"
    default_auto_field = "django.db.models.BigAutoField"

    def ready(self) -> None:
        from django.conf import settings

        from . import metering, records

        if settings.USAGE_METERING_MODE != "off":
            records.subscribe(metering.observe)
