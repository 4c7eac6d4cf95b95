"""The DIDComm section's tests take the DIDComm client fixtures of tests/support/didcomm_client.py (an agent, and
POST /didcomm for tenant A); the operator fixtures are tests/support/operators.py's, everywhere."""

from tests.support.didcomm_client import didcomm_a, wallet  # noqa: F401 (fixtures)
