"""The import direction of docs/architecture.md, checked on the source: a domain module imports
only from apps below its own, and nothing imports an app's modules lazily to get around that."""

from __future__ import annotations

import ast
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
# Bottom to top; apps on one rank are peers and do not import each other.
RANK = {"wire": 0, "tenants": 1, "messaging": 2, "realtime": 3, "usage": 3, "ops": 3, "decentrl": 4, "didcomm": 4}
# Adapters sit on top of the stack and may read from any app (docs/architecture.md).
ADAPTERS = {"admin.py", "api.py", "api_urls.py", "views.py", "urls.py", "tasks.py", "forms.py", "serializers.py"}
# Function-level imports that are not layering workarounds: AppConfig.ready() (models are loaded
# only then) and the metrics collector, importable before Django is set up.
ALLOWED_LAZY = {("apps/ops/metrics.py", "apps.messaging.models")}


def _modules():
    for path in sorted((ROOT / "apps").rglob("*.py")):
        rel = path.relative_to(ROOT).as_posix()
        parts = rel.split("/")
        if "migrations" in parts or parts[1] not in RANK:
            continue
        yield rel, parts[1], path


def _app_imports(tree: ast.AST):
    """(imported app, module name, inside a function?) for every `apps.<app>` import."""
    functions = [n for n in ast.walk(tree) if isinstance(n, ast.FunctionDef | ast.AsyncFunctionDef)]
    lazy_nodes = {id(n) for fn in functions for n in ast.walk(fn)}
    for node in ast.walk(tree):
        names = []
        if isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            names = [node.module]
        elif isinstance(node, ast.Import):
            names = [a.name for a in node.names]
        for name in names:
            if name.startswith("apps."):
                yield name.split(".")[1], name, id(node) in lazy_nodes


def test_domain_modules_import_only_apps_below_them():
    wrong = []
    for rel, app, path in _modules():
        if path.name in ADAPTERS or "/management/" in rel:
            continue
        for other, name, _lazy in _app_imports(ast.parse(path.read_text())):
            if other != app and other in RANK and RANK[other] >= RANK[app] and not rel.endswith("/apps.py"):
                wrong.append(f"{rel} imports {name}")
    assert wrong == []


def test_no_lazy_imports_of_other_apps_outside_app_ready():
    wrong = []
    for rel, app, path in _modules():
        if rel.endswith("/apps.py"):
            continue
        for other, name, lazy in _app_imports(ast.parse(path.read_text())):
            if lazy and other != app and (rel, name) not in ALLOWED_LAZY:
                wrong.append(f"{rel} imports {name} inside a function")
    assert wrong == []


def test_the_protocol_library_imports_no_django_and_no_app():
    for path in sorted((ROOT / "apps" / "wire").rglob("*.py")):
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.ImportFrom) and node.module:
                assert not node.module.startswith(("django", "apps.")), (path, node.module)
            if isinstance(node, ast.Import):
                assert not any(a.name.startswith(("django", "apps.")) for a in node.names), path
