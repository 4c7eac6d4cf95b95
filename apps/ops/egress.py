"""The outbound target rule: where the mediator may send a request a client chose the address of
(a DIDComm v1 agent's endpoint, a Web Push subscription's endpoint). A host must resolve only to
public addresses, so a client cannot make the mediator reach the operator's own network (SSRF)."""

from __future__ import annotations

import ipaddress
import socket
from urllib.parse import urlsplit


class TargetRefused(Exception):
    """The URL is not an http(s) URL to a public address."""


# IPv6 forms that carry an IPv4 address (RFC 6052 NAT64, RFC 8215 local-use NAT64, RFC 3056
# 6to4, RFC 4380 Teredo, RFC 4291 IPv4-compatible and -mapped): a packet to one reaches the IPv4
# address, so that address must pass the check too.
_NAT64 = ipaddress.IPv6Network("64:ff9b::/96")
_NAT64_LOCAL = ipaddress.IPv6Network("64:ff9b:1::/48")
_IPV4_COMPATIBLE = ipaddress.IPv6Network("::/96")


def embedded_ipv4(address: ipaddress.IPv6Address) -> list[ipaddress.IPv4Address]:
    """Every IPv4 address an IPv6 address may lead to (none for a plain IPv6 address)."""
    found = [a for a in (address.ipv4_mapped, address.sixtofour) if a is not None]
    if address.teredo is not None:
        found.extend(address.teredo)  # (server, client), the client's address de-obfuscated
    if address in _NAT64 or address in _IPV4_COMPATIBLE:
        found.append(ipaddress.IPv4Address(address.packed[12:]))
    if address in _NAT64_LOCAL:
        # The local prefix is /48 or longer and RFC 6052 puts the IPv4 address at a place that
        # depends on it (skipping bits 64-71): every place it can be.
        b = address.packed
        found += [ipaddress.IPv4Address(x) for x in (b[6:8] + b[9:11], b[7:8] + b[9:12], b[9:13], b[12:16])]
    return found


def _public(address: ipaddress.IPv4Address | ipaddress.IPv6Address) -> bool:
    return address.is_global and not address.is_multicast


def check_target(url: str, *, allow_private: bool, allow_loopback: bool) -> None:
    """Refuse non-http(s) URLs and hosts resolving to non-global addresses, or IPv6 addresses
    embedding one (SSRF), unless allowed: every address when private targets are allowed, loopback
    ones when loopback is (a development deployment's default)."""
    parts = urlsplit(url)
    if parts.scheme not in ("http", "https") or not parts.hostname:
        raise TargetRefused("not an http(s) URL")
    if allow_private:
        return
    try:
        infos = socket.getaddrinfo(parts.hostname, parts.port or (443 if parts.scheme == "https" else 80))
    except (OSError, UnicodeError) as exc:
        raise TargetRefused("host does not resolve") from exc
    for info in infos:
        address = ipaddress.ip_address(str(info[4][0]).split("%", 1)[0])
        embedded = embedded_ipv4(address) if address.version == 6 else []
        if allow_loopback and (address.is_loopback or (embedded and all(a.is_loopback for a in embedded))):
            continue
        if not all(_public(a) for a in (address, *embedded)):
            raise TargetRefused("host resolves to a non-public address")
