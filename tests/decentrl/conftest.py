"""The command tests' fixtures (tests/support/commands.py): tenants with their rate limits off, dave,
and registered identities. The helpers are imported from there too (tests/realtime names them here)."""

from tests.support.commands import (  # noqa: F401 (fixtures, and the helpers tests/realtime imports from here)
    ERROR_CODES,
    body_of,
    data_counts,
    dave,
    envelope,
    err,
    now_ms,
    registered,
    row_counts,
    tenant_a,
    tenant_b,
)
