from django.apps import AppConfig


class OpsConfig(AppConfig):
    """Scheduled maintenance, abuse limits, metrics and logging helpers (issue 5)."""

    name = "apps.ops"
    label = "ops"
    verbose_name = "Operations"

    def ready(self) -> None:
        from apps.protocol import hooks

        from . import limits, metrics, signals

        # ready() may run more than once in some test setups: register each hook exactly once.
        for registry, fn in (
            (hooks.PRE_CHECKS, limits.per_ip_check),
            (hooks.SENDER_CHECKS, limits.per_did_check),
            (hooks.WS_CONNECT_CHECKS, limits.ws_connect_check),
            (hooks.WS_AUTH_CHECKS, limits.ws_auth_check),
            (hooks.OBSERVERS, metrics.observe_command),
            (hooks.WS_OBSERVERS, metrics.observe_ws),
        ):
            if fn not in registry:
                registry.append(fn)
        signals.connect()
