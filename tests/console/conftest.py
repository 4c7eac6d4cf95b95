"""The DIDComm section's tests take the DIDComm client fixtures of tests/didcomm/app (an agent, and
POST /didcomm for tenant A); the operator fixtures are tests/support/operators.py's, everywhere."""

from tests.didcomm.app.conftest import didcomm_a, wallet  # noqa: F401 (fixtures)
