"""The import direction of docs/architecture.md, checked on the source of every module under apps/
(views, admin, API, tasks, commands and apps.py alike: there are no exemptions):

- a module imports another app only if that app sits on a lower rank;
- no module imports a module of the project inside a function (which would hide an upward import
  or a cycle), except in `AppConfig.ready()`: Django imports every app's apps.py before any model
  exists, so the registrations that need models are made there, and those imports still point down;
- no statement names a table of another app: a table's name (its model's `_meta.db_table`) appears
  only in the string literals of its own app's modules, and only its own app's code reads
  `Model._meta.db_table` to compose one. A statement that must reach another app's table calls the
  owner's function or embeds the owner's fragment (apps/messaging/presence.py's for the DIDComm
  forward). Migrations are not scanned: they are the record of texts applied once, kept as they ran
  (a fresh database replays them); what runs today is the latest text, which lives in a module.
  Docstrings are prose, not statements.
"""

from __future__ import annotations

import ast
from pathlib import Path

from django.apps import apps as django_apps

ROOT = Path(__file__).resolve().parent.parent
# Bottom to top; apps on one rank are peers and do not import each other.
RANK = {
    "wire": 0,
    "tenants": 1,
    "messaging": 2,
    "usage": 3,
    "ops": 3,
    "realtime": 4,
    "push": 4,
    "decentrl": 5,
    "didcomm": 5,
    "console": 6,
}


def _modules():
    for path in sorted((ROOT / "apps").rglob("*.py")):
        rel = path.relative_to(ROOT).as_posix()
        parts = rel.split("/")
        if "migrations" in parts or len(parts) < 3:
            continue
        yield rel, parts[1], path


def _ready_bodies(tree: ast.AST) -> set[int]:
    """Node ids inside `ready()` methods of classes (apps.py holds only the AppConfig)."""
    return {
        id(node)
        for cls in ast.walk(tree)
        if isinstance(cls, ast.ClassDef)
        for fn in cls.body
        if isinstance(fn, ast.FunctionDef) and fn.name == "ready"
        for node in ast.walk(fn)
    }


def _project_imports(tree: ast.AST, rel: str):
    """(imported app, module name, import node) for every import of a module of the project;
    a relative import counts as one of the importing module's own app."""
    own = rel.split("/")[1]
    for node in ast.walk(tree):
        if isinstance(node, ast.ImportFrom) and node.level > 0:
            yield own, "." * node.level + (node.module or ""), node
        elif isinstance(node, ast.ImportFrom) and node.module:
            if node.module == "apps" or node.module.startswith("apps."):
                modules = [f"apps.{a.name}" for a in node.names] if node.module == "apps" else [node.module]
                for name in modules:
                    yield name.split(".")[1], name, node
            elif node.module.split(".")[0] == "mediator_project":
                yield "mediator_project", node.module, node
        elif isinstance(node, ast.Import):
            for alias in node.names:
                top = alias.name.split(".")[0]
                if top == "apps":
                    yield alias.name.split(".")[1], alias.name, node
                elif top == "mediator_project":
                    yield "mediator_project", alias.name, node


def _lazy(tree: ast.AST) -> set[int]:
    functions = [n for n in ast.walk(tree) if isinstance(n, ast.FunctionDef | ast.AsyncFunctionDef)]
    return {id(n) for fn in functions for n in ast.walk(fn)}


def test_every_app_is_ranked():
    apps = {p.name for p in (ROOT / "apps").iterdir() if (p / "__init__.py").exists()}
    assert apps == set(RANK)


def test_every_module_imports_only_apps_below_it():
    wrong = []
    for rel, app, path in _modules():
        for other, name, _node in _project_imports(ast.parse(path.read_text()), rel):
            if other != app and not (other in RANK and RANK[other] < RANK[app]):
                wrong.append(f"{rel} imports {name}")
    assert wrong == []


def test_no_project_import_inside_a_function_outside_app_ready():
    wrong = []
    for rel, _app, path in _modules():
        tree = ast.parse(path.read_text())
        allowed = _ready_bodies(tree) if path.name == "apps.py" else set()
        lazy = _lazy(tree)
        for _other, name, node in _project_imports(tree, rel):
            if id(node) in lazy and id(node) not in allowed:
                wrong.append(f"{rel}:{node.lineno} imports {name} inside a function")
    assert wrong == []


def test_the_checks_see_what_they_forbid():
    """The walkers above find an upward import, a relative import and a lazy one outside ready()."""
    source = (
        "from apps.didcomm.selectors import x\n"
        "from . import services\n"
        "class C:\n"
        "    def ready(self):\n"
        "        from apps.tenants.models import Tenant\n"
        "def f():\n"
        "    from .tasks import t\n"
    )
    tree = ast.parse(source)
    found = sorted((node.lineno, other, name) for other, name, node in _project_imports(tree, "apps/usage/views.py"))
    assert found == [
        (1, "didcomm", "apps.didcomm.selectors"),
        (2, "usage", "."),
        (5, "tenants", "apps.tenants.models"),
        (7, "usage", ".tasks"),
    ]
    lazy, ready = _lazy(tree), _ready_bodies(tree)
    assert [
        node.lineno
        for _o, _n, node in _project_imports(tree, "apps/usage/views.py")
        if id(node) in lazy and id(node) not in ready
    ] == [7]


def _owners() -> dict[str, str]:
    """Every table of the project's models (auto-created many-to-many tables too) → its app's folder."""
    return {
        model._meta.db_table: config.name.split(".")[1]
        for config in django_apps.get_app_configs()
        if config.name.startswith("apps.")
        for model in config.get_models(include_auto_created=True)
    }


def _docstrings(tree: ast.AST) -> set[int]:
    kinds = ast.Module | ast.ClassDef | ast.FunctionDef | ast.AsyncFunctionDef
    return {
        id(node.body[0].value)
        for node in ast.walk(tree)
        if isinstance(node, kinds)
        and node.body
        and isinstance(node.body[0], ast.Expr)
        and isinstance(node.body[0].value, ast.Constant)
    }


def _imported_from(tree: ast.AST, own: str) -> dict[str, str]:
    """Each name a module imports from an app's module → that app (relative imports: its own)."""
    names = {}
    for node in ast.walk(tree):
        if isinstance(node, ast.ImportFrom):
            if node.level > 0:
                app = own
            elif node.module and node.module.startswith("apps."):
                app = node.module.split(".")[1]
            else:
                continue
            for alias in node.names:
                names[alias.asname or alias.name] = app
    return names


def _foreign_tables(tree: ast.AST, own: str, owners: dict[str, str]) -> list[tuple[int, str]]:
    """(line, table) for every table of another app a module's code names: in a string literal
    (f-strings' literal parts too) or as `Model._meta.db_table` of a model imported from another app."""
    docs, imported = _docstrings(tree), _imported_from(tree, own)
    found = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Constant) and isinstance(node.value, str) and id(node) not in docs:
            found += [(node.lineno, t) for t in sorted(_words(node.value)) if owners.get(t, own) != own]
        elif (
            isinstance(node, ast.Attribute)
            and node.attr == "db_table"
            and isinstance(node.value, ast.Attribute)
            and node.value.attr == "_meta"
            and isinstance(node.value.value, ast.Name)
            and imported.get(node.value.value.id, own) != own
        ):
            found.append((node.lineno, f"{node.value.value.id}._meta.db_table"))
    return sorted(found)


def _words(text: str) -> set[str]:
    """The identifiers in a SQL text (a table's name is one, whatever surrounds it)."""
    word, words = [], set()
    for ch in text + " ":
        if ch.isalnum() or ch == "_":
            word.append(ch)
        elif word:
            words.add("".join(word))
            word = []
    return words


def test_no_statement_names_a_table_of_another_app():
    owners = _owners()
    assert {"protocol_nonce", "messaging_pendingqueuedepth", "didcomm_queuedmessage"} <= set(owners)
    wrong = [
        f"{rel}:{line} ({app}) names {table}"
        for rel, app, path in _modules()
        for line, table in _foreign_tables(ast.parse(path.read_text()), app, owners)
    ]
    assert wrong == []


def test_the_table_check_sees_what_it_forbids():
    """The walker finds another app's table in a literal and in an f-string, and another app's
    model's `_meta.db_table`; its own tables, docstrings and local models pass."""
    owners = {"messaging_pendingevent": "messaging", "didcomm_queuedmessage": "didcomm"}
    source = (
        '"""Reads messaging_pendingevent (prose)."""\n'
        "from apps.messaging.models import PendingEvent\n"
        "from .models import QueuedMessage\n"
        "A = 'SELECT 1 FROM didcomm_queuedmessage q'\n"
        "B = f'DELETE FROM messaging_pendingevent WHERE id = {x}'\n"
        "C = f'SELECT 1 FROM {PendingEvent._meta.db_table}'\n"
        "D = QueuedMessage._meta.db_table\n"
        "E = '(messaging_pendingevent.id)'\n"
    )
    found = _foreign_tables(ast.parse(source), "didcomm", owners)
    assert found == [(5, "messaging_pendingevent"), (6, "PendingEvent._meta.db_table"), (8, "messaging_pendingevent")]


def test_the_protocol_library_imports_no_django_and_no_app():
    for path in sorted((ROOT / "apps" / "wire").rglob("*.py")):
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.ImportFrom) and node.module:
                assert not node.module.startswith(("django", "apps.")), (path, node.module)
            if isinstance(node, ast.Import):
                assert not any(a.name.startswith(("django", "apps.")) for a in node.names), path
