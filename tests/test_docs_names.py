"""The code names docs/architecture.md cites exist: a doc that names a function, a file or a module
the code no longer has is wrong for every reader after it.

Read from the doc's `code spans`, each checked by its shape (anything else is prose):
- a path from the repository's root (`apps/…`, `tests/…::name`, …) exists, and its `::name` is
  defined in it; `<app>/<file>.py` exists under apps/;
- a dotted name that starts with an app (`ops.limits.per_ip`, `apps.wire.envelope`) is a module
  whose next part it defines; `<module>.<name>` for any other module stem (`sql.deliver`,
  `replay.claim`) is defined in a module of that stem;
- a bare snake_case or CamelCase name (`tenant_for_host`, `CommandEntry`) is a word of the code
  (SQL names such as `didcomm_forward_store` or a table live in its statement texts).
"""

from __future__ import annotations

import ast
import functools
import re
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
DOCS = ["docs/architecture.md"]
CODE = ("apps", "mediator_project", "spark_reports", "scripts", "tests")
# The repository's folders (var/ and test-artifacts/ are made at run time: not checked).
TOP = {"apps", "bench", "deploy", "docs", "mediator_project", "scripts", "spark_reports", "templates", "tests"}
APPS = {p.name for p in (ROOT / "apps").iterdir() if (p / "__init__.py").is_file()}


def _sources() -> list[Path]:
    here = Path(__file__).resolve()  # whose examples name what the code lacks
    return [f for base in CODE for f in (ROOT / base).rglob("*.py") if "node_modules" not in f.parts and f != here]


@functools.cache
def _defined(path: Path) -> frozenset[str]:
    """What a module defines or binds: functions, classes, assigned names and attributes, imports."""
    out: set[str] = set()
    for node in ast.walk(ast.parse(path.read_text(), str(path))):
        if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef | ast.ClassDef):
            out.add(node.name)
        elif isinstance(node, ast.Name) and isinstance(node.ctx, ast.Store):
            out.add(node.id)
        elif isinstance(node, ast.Attribute) and isinstance(node.ctx, ast.Store):
            out.add(node.attr)
        elif isinstance(node, ast.Import | ast.ImportFrom):
            out.update((a.asname or a.name).split(".")[0] for a in node.names)
    return frozenset(out)


@functools.cache
def _words() -> frozenset[str]:
    words: set[str] = set()
    for f in _sources():
        words.update(re.findall(r"\w+", f.read_text()))
        words.add(f.stem)
    return frozenset(words)


@functools.cache
def _by_stem() -> dict[str, list[Path]]:
    stems: dict[str, list[Path]] = {}
    for f in _sources():
        stems.setdefault(f.stem, []).append(f)
    return stems


def _module(parts: list[str]) -> tuple[Path, int] | None:
    """The longest prefix of `parts` that is a module (apps/<…>.py, or from the root), and its length."""
    for k in range(len(parts), 0, -1):
        for base in (ROOT / "apps", ROOT):
            p = base.joinpath(*parts[:k])
            if p.with_suffix(".py").is_file():
                return p.with_suffix(".py"), k
            if (p / "__init__.py").is_file():
                return p / "__init__.py", k
    return None


def problem(span: str) -> str | None:
    """Why the code span `span` names nothing the code has, or None."""
    span = re.sub(r"\(.*\)$", "", span.strip())
    if m := re.fullmatch(r"((\w+)/[\w./-]*?)/?(?:::(\w+))?", span):
        path, top, name = m.groups()
        if top in TOP:
            if not (ROOT / path).exists():
                return "no such path"
            if name and name not in _defined(ROOT / path):
                return f"{path} defines no {name}"
            return None
        if top in APPS and path.endswith(".py"):
            return None if (ROOT / "apps" / path).is_file() else "no such file under apps/"
        return None
    if re.fullmatch(r"\w+(\.\w+)+", span):
        parts = span.split(".")
        if parts[-1] == "py":
            return None if parts[0] in _by_stem() or span in {"manage.py"} else "no such file"
        if parts[0] == "apps":
            parts = parts[1:]
        if parts[0] in APPS | {"mediator_project", "spark_reports"}:
            found = _module(parts)
            if found is None:
                return "no such module"
            path, k = found
            if k < len(parts) and parts[k] not in _defined(path):
                return f"{path.relative_to(ROOT)} defines no {parts[k]}"
            return None
        if len(parts) == 2 and parts[0] in _by_stem():
            if not any(parts[1] in _defined(f) for f in _by_stem()[parts[0]]):
                return f"no {parts[0]}.py defines {parts[1]}"
        return None
    if re.fullmatch(r"[a-z]\w*_\w+|[A-Z][a-z0-9]+[A-Z]\w*", span) and span not in _words():
        return "not a name of the code"
    return None


@pytest.mark.parametrize("doc", DOCS)
def test_every_code_name_the_doc_cites_exists(doc):
    text = (ROOT / doc).read_text()
    wrong = []
    for m in re.finditer(r"`([^`\n]+)`", text):
        why = problem(m.group(1))
        if why:
            wrong.append(f"{doc}:{text.count(chr(10), 0, m.start()) + 1}: `{m.group(1)}`: {why}")
    assert wrong == []


@pytest.mark.parametrize(
    ("span", "wrong"),
    [
        ("pending_event_enqueue", True),  # a function that was never there
        ("tenant_for_host", False),
        ("apps/messaging/replay.py", False),
        ("apps/messaging/nothing.py", True),
        ("messaging/replay.py", False),
        ("tests/e2e/test_story.py::test_the_nonce_store_survives_a_daphne_restart", False),
        ("tests/e2e/test_story.py::test_gone", True),
        ("ops.limits.per_ip", False),
        ("ops.limits.per_everything", True),
        ("sql.deliver", False),
        ("sql.claim", True),
        ("didcomm_forward_store", False),  # a SQL function: a word of its statement text
        ("POST /", False),
    ],
)
def test_the_check_tells_a_name_the_code_has_from_one_it_has_not(span, wrong):
    assert (problem(span) is not None) is wrong
