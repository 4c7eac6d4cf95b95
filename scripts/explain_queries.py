#!/usr/bin/env python
"""Regenerate docs/indexes.md: the PostgreSQL plan of every query the protocol commands make.

Runs tests/decentrl/test_indexes.py (which seeds a few thousand rows, ANALYZEs and EXPLAINs what
each command really executes) with EXPLAIN_OUT pointing at the output file. Needs the PostgreSQL
the test suite uses (TEST_DATABASE_URL, default postgresql://postgres@127.0.0.1:5432/mediator).

    .venv/bin/python scripts/explain_queries.py [output.md]
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def main() -> int:
    out = Path(sys.argv[1]) if len(sys.argv) > 1 else ROOT / "docs" / "indexes.md"
    env = dict(os.environ, EXPLAIN_OUT=str(out.resolve()))
    cmd = [sys.executable, "-m", "pytest", "-q", "-p", "no:xdist", "tests/decentrl/test_indexes.py"]
    result = subprocess.run(cmd, cwd=ROOT, env=env)
    if result.returncode == 0:
        print(f"wrote {out}")
    return result.returncode


if __name__ == "__main__":
    raise SystemExit(main())
