"""spark_reports/ runs as its own process, locally or on a cluster: it imports nothing from apps/
and no Django, and transform.py does no I/O."""

from __future__ import annotations

import ast
from pathlib import Path

SPARK = Path(__file__).resolve().parents[2] / "spark_reports"


def imported(path: Path) -> set[str]:
    names: set[str] = set()
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.Import):
            names.update(a.name for a in node.names)
        elif isinstance(node, ast.ImportFrom) and node.module and not node.level:
            names.add(node.module)
    return names


def test_spark_reports_import_nothing_from_apps_or_django():
    files = sorted(SPARK.glob("*.py"))
    lake = {f"lake{part}.py" for part in ("", "_layout", "_log", "_export", "_read", "_compaction", "_cleanup")}
    assert {f.name for f in files} >= {"extract.py", "transform.py", "load.py", "usage_report.py", "config.py"} | lake
    for f in files:
        bad = {n for n in imported(f) if n.split(".")[0] in ("apps", "django", "mediator_project")}
        assert not bad, (f.name, bad)


def test_transform_is_pure():
    assert {n.split(".")[0] for n in imported(SPARK / "transform.py")} <= {
        "__future__",
        "dataclasses",
        "datetime",
        "pyspark",
    }
