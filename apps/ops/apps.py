from django.apps import AppConfig


class OpsConfig(AppConfig):
    """Scheduled maintenance, abuse limits, metrics and logging helpers.

    The front doors plug `limits` and `metrics` into their own extension points
    (apps/decentrl/apps.py); ops imports no front door.
    """

    name = "apps.ops"
    label = "ops"
    verbose_name = "Operations"

    def ready(self) -> None:
        from . import signals

        signals.connect()
