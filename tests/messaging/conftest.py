"""The command tests' fixtures (tests/support/commands.py): tenants with their rate limits off, dave,
and registered identities."""

from tests.support.commands import dave, registered, tenant_a, tenant_b  # noqa: F401 (fixtures)
