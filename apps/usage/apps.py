from django.apps import AppConfig


class UsageConfig(AppConfig):
    """Command metering, usage report runs and the staff dashboard. The front doors register
    `metering.observe` as a command observer (apps/decentrl/apps.py)."""

    name = "apps.usage"
    label = "usage"
    verbose_name = "Usage"
    default_auto_field = "django.db.models.BigAutoField"
