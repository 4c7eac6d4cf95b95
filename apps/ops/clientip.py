"""The client address of a request or socket, shared by every front door (per-IP limits, logs)."""

from __future__ import annotations

import ipaddress

from django.conf import settings


def _trusted_proxy(addr: str) -> bool:
    try:
        ip = ipaddress.ip_address(addr)
    except ValueError:
        return False
    return any(ip in ipaddress.ip_network(net, strict=False) for net in settings.MEDIATOR_TRUSTED_PROXIES)


def forwarded_client(peer: str | None, forwarded_for: str | None) -> str | None:
    """The client address for a request from `peer` carrying X-Forwarded-For `forwarded_for`."""
    if not peer or not forwarded_for or not settings.MEDIATOR_TRUSTED_PROXIES or not _trusted_proxy(peer):
        return peer
    hops = [h.strip() for h in forwarded_for.split(",") if h.strip()]
    for hop in reversed(hops):
        if not _trusted_proxy(hop):
            return hop
    return hops[0] if hops else peer
