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
        from apps.ops import jobs, metrics
        from apps.usage import records

        from . import nonces

        # The front door sits on top: it plugs metrics into the request records' observers (apps
        # below never import it; usage registers metering itself) and its jobs into ops'. Its limits
        # and socket metrics it calls itself (dispatch, consumers).
        records.subscribe(metrics.observe)
        jobs.register(nonces.PRUNE_JOB)
        metrics.register_store_size("mediator_nonce_store_size", "Nonces held by the replay store.", nonces.nonce_count)
