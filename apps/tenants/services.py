"""Tenant write operations."""

from __future__ import annotations

from django.conf import settings
from django.db import transaction

from apps.protocol.wire.crypto import Ed25519KeyPair, X25519KeyPair
from apps.protocol.wire.did import web_did_for_host

from .models import Tenant


def tenant_create(*, slug: str, domain: str, name: str = "", public_url: str | None = None, **policy) -> Tenant:
    """Create a tenant with fresh keys; its did:web follows its domain."""
    domain = domain.lower()
    tenant = Tenant(
        slug=slug,
        name=name or slug,
        domain=domain,
        did=web_did_for_host(domain),
        public_url=public_url or f"{settings.MEDIATOR_PUBLIC_SCHEME}://{domain}",
        **policy,
    )
    tenant.set_keys(Ed25519KeyPair.generate(), X25519KeyPair.generate())
    tenant.full_clean()
    tenant.save()
    return tenant


@transaction.atomic
def tenant_ensure_default(*, port: int, host: str = "localhost") -> tuple[Tenant, bool]:
    """Create the development default tenant, or move it to the current port (its DID follows)."""
    domain = f"{host}:{port}" if port not in (80, 443) else host
    slug = settings.MEDIATOR_DEFAULT_TENANT or "default"
    tenant = Tenant.objects.select_for_update().filter(slug=slug).first()
    if tenant is None:
        return tenant_create(slug=slug, domain=domain, name="Default (development)"), True
    if tenant.domain != domain:
        tenant.domain = domain
        tenant.did = web_did_for_host(domain)
        tenant.public_url = f"{settings.MEDIATOR_PUBLIC_SCHEME}://{domain}"
        tenant.save(update_fields=["domain", "did", "public_url", "updated_at"])
    return tenant, False
