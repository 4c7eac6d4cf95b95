"""Filters for the console and the dashboard: the one time, size and duration format
(apps/wire/display.py), and DIDs shown as alias + short form with a copy button."""

from __future__ import annotations

from django import template
from django.utils.html import format_html
from django.utils.text import capfirst

from apps.tenants.models import AuditEntry, Tenant
from apps.tenants.permissions import AUDIT_ACTIONS, operator_may
from apps.wire import display
from apps.wire.did import DidError, parse_decentrl

register = template.Library()


@register.filter
def utc(value) -> str:
    """`2026-11-23T08:36:12Z` in a `<time class="utc">` that never wraps at its hyphens; where it must
    wrap, it wraps before the `T` (console.css). An empty value stays empty (templates add their own
    "never")."""
    if value in (None, ""):
        return ""
    text = display.utc_iso(value)
    day, clock = text.split("T", 1)
    return format_html('<time class="utc" datetime="{}"><span>{}</span><wbr><span>T{}</span></time>', text, day, clock)


@register.filter
def crumb(value) -> str:
    """A part of the console header's breadcrumb: a tenant by the name its operator entered (the
    slug when it has none), anything else as unfold writes it (capitalised)."""
    if isinstance(value, Tenant):
        return value.name or value.slug
    return capfirst(str(value))


@register.filter
def iec_bytes(value) -> str:
    return "" if value is None else display.human_bytes(value)


@register.filter
def ms(value) -> str:
    return "" if value is None else display.human_ms(value)


def did_alias(did: str) -> str:
    """The alias a did:decentrl carries (public metadata), or "" for other DIDs."""
    try:
        return parse_decentrl(did).alias or ""
    except DidError:
        return ""


def did_short(did: str, *, head: int = 12, tail: int = 8) -> str:
    """`did:decentrl:YWxpY2U6z6Mk…M0E4MDAw`: the method, the start and the end, for a column that must fit."""
    scheme, sep, rest = did.partition(":")
    method, sep2, body = rest.partition(":")
    if not (sep and sep2) or len(body) <= head + tail + 1:
        return did
    return f"{scheme}:{method}:{body[:head]}…{body[-tail:]}"


@register.simple_tag
def did_cell(did: str):
    """A DID as alias, shortened DID (full DID in its title) and a copy button (static/console/console.js)."""
    if not did:
        return ""
    alias = did_alias(did)
    return format_html(
        '<span class="did-cell">{}<code class="did-short" title="{}">{}</code>'
        '<button type="button" class="did-copy" data-copy="{}" title="Copy the full DID" aria-label="Copy the full DID">'
        '<span class="material-symbols-outlined">content_copy</span></button></span>',
        format_html('<span class="did-alias">{}</span> ', alias) if alias else "",
        did,
        did_short(did),
        did,
    )


@register.filter
def words(value) -> str:
    """`pending_events` → `Pending events`, `didcomm_messages` → `DIDComm messages` (column headings
    from keys; acronyms keep their capitals)."""
    return display.words(str(value))


# A tenant's History page lists its audit entries (every change through the console, the API and
# the CLI), not only the admin's own LogEntry rows, which knew of nothing but "Added.".
HISTORY_ENTRIES = 200


@register.simple_tag(takes_context=True)
def tenant_audit_history(context, tenant) -> list[AuditEntry] | None:
    """The tenant's latest audit entries, newest first; None for a user who may not read the audit log."""
    if not operator_may(context["request"].user, AuditEntry, AUDIT_ACTIONS["list"]):
        return None
    return list(AuditEntry.objects.filter(tenant=tenant).order_by("-at", "-id")[:HISTORY_ENTRIES])
