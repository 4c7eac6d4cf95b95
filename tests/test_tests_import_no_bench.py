"""The test suite stands without the benchmark suite: nothing under tests/ imports from bench/ (shared
helpers live in tests/support or tests/interop, which bench/ may import)."""

import ast
from pathlib import Path

TESTS = Path(__file__).resolve().parent


def test_no_test_module_imports_bench():
    offenders = []
    for path in TESTS.rglob("*.py"):
        if "node_modules" in path.parts:
            continue
        for node in ast.walk(ast.parse(path.read_text(), str(path))):
            names = []
            if isinstance(node, ast.Import):
                names = [alias.name for alias in node.names]
            elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
                names = [node.module]
            if any(name == "bench" or name.startswith("bench.") for name in names):
                offenders.append(f"{path.relative_to(TESTS)}:{node.lineno}")
    assert offenders == []
