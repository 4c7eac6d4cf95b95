#!/usr/bin/env python
"""Print the product files on the path of one request, entry to write, for a Decentrl TWO_WAY_PRIVATE
`POST /`, a DIDComm v2 forward and a DIDComm v1 forward (docs/architecture.md, "The shape in one
picture").

Runs tests/test_request_path.py, which builds one valid request of each kind against a test tenant
and records, under sys.setprofile, which files of apps/ and mediator_project/ (migrations aside) run
a Python function from the production WSGI application (mediator_project/wsgi.py) until the request's
write statement executes (tests/support/request_path.py). Needs the PostgreSQL and Redis the test
suite uses (scripts/ensure_services.sh).

    .venv/bin/python scripts/request_path.py
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def main() -> int:
    cmd = [sys.executable, "-m", "pytest", "-q", "-s", "-p", "no:logging", "tests/test_request_path.py"]
    result = subprocess.run(cmd, cwd=ROOT, env=dict(os.environ, LOG_LEVEL="WARNING"))
    return result.returncode


if __name__ == "__main__":
    raise SystemExit(main())
