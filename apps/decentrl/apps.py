from collections.abc import Callable
from typing import Any

from django.apps import AppConfig


class DecentrlConfig(AppConfig):
    """The Decentrl front door (DCTRL-0004): dispatch, `POST /`, `/ws`, the DID document, `/health`.

    The label stays "protocol" so that the nonce store keeps its table (`protocol_nonce`) and its
    migration history from before the app was renamed.
    """

    name = "apps.decentrl"
    label = "protocol"
    verbose_name = "Decentrl"

    def ready(self) -> None:
        from apps.ops import jobs, limits, metrics
        from apps.usage import records

        from . import hooks, nonces

        # The front door sits on top: it plugs the lower apps' limits and metrics into its own
        # extension points and the request records' observers (apps below never import it; usage
        # registers metering itself). ready() may run more than once in some test setups: register
        # each hook exactly once.
        wiring: list[tuple[list[Any], Callable[..., None]]] = [
            (hooks.PRE_CHECKS, limits.per_ip_check),
            (hooks.SENDER_CHECKS, limits.per_did_check),
            (hooks.WS_CONNECT_CHECKS, limits.ws_connect_check),
            (hooks.WS_AUTH_CHECKS, limits.ws_auth_check),
            (hooks.WS_OBSERVERS, metrics.observe_ws),
        ]
        for registry, fn in wiring:
            if fn not in registry:
                registry.append(fn)
        records.subscribe(metrics.observe)
        jobs.register(nonces.PRUNE_JOB)
        metrics.register_store_size("mediator_nonce_store_size", "Nonces held by the replay store.", nonces.nonce_count)
