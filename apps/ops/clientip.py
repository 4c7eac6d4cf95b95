"""The client address of a request or socket, shared by every front door (per-IP limits, logs).

Behind the layout's nginx every command carries the same few (peer, X-Forwarded-For) pairs, so
the answer is kept per pair (a bounded LRU) and the trusted networks are parsed once; both are
forgotten when MEDIATOR_TRUSTED_PROXIES changes (setting_changed, as in tests)."""

from __future__ import annotations

import functools
import ipaddress

from django.conf import settings
from django.core.signals import setting_changed
from django.dispatch import receiver


@functools.cache
def _trusted_networks() -> tuple[ipaddress.IPv4Network | ipaddress.IPv6Network, ...]:
    return tuple(ipaddress.ip_network(net, strict=False) for net in settings.MEDIATOR_TRUSTED_PROXIES)


def _trusted_proxy(addr: str) -> bool:
    try:
        ip = ipaddress.ip_address(addr)
    except ValueError:
        return False
    return any(ip in net for net in _trusted_networks())


@functools.lru_cache(maxsize=4096)
def forwarded_client(peer: str | None, forwarded_for: str | None) -> str | None:
    """The client address for a request from `peer` carrying X-Forwarded-For `forwarded_for`."""
    if not peer or not forwarded_for or not settings.MEDIATOR_TRUSTED_PROXIES or not _trusted_proxy(peer):
        return peer
    hops = [h.strip() for h in forwarded_for.split(",") if h.strip()]
    for hop in reversed(hops):
        if not _trusted_proxy(hop):
            return hop
    return hops[0] if hops else peer


@receiver(setting_changed)
def _trust_changed(*, setting: str, **_kwargs) -> None:
    if setting == "MEDIATOR_TRUSTED_PROXIES":
        _trusted_networks.cache_clear()
        forwarded_client.cache_clear()
