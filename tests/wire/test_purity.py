"""The wire package is pure Python: importing any of it must not import Django (docs/contributing.md §13)."""

from __future__ import annotations

import json
import pkgutil
import subprocess
import sys
from pathlib import Path

import apps.wire as wire

ROOT = Path(__file__).resolve().parents[2]

PROBE = """
import importlib, json, pkgutil, sys
import apps.wire as wire
names = sorted("apps.wire." + m.name for m in pkgutil.iter_modules(wire.__path__))
for name in names:
    importlib.import_module(name)
print(json.dumps({"modules": names, "django": sorted(m for m in sys.modules if m == "django" or m.startswith("django."))}))
"""


def test_importing_every_wire_module_does_not_import_django():
    expected = sorted("apps.wire." + m.name for m in pkgutil.iter_modules(wire.__path__))
    assert "apps.wire.cli" in expected and "apps.wire.client" in expected
    env = {"PATH": "/usr/bin:/bin", "PYTHONPATH": str(ROOT)}  # no DJANGO_SETTINGS_MODULE either
    out = subprocess.run([sys.executable, "-c", PROBE], cwd=ROOT, env=env, capture_output=True, text=True, timeout=60)
    assert out.returncode == 0, out.stderr
    assert json.loads(out.stdout) == {"modules": expected, "django": []}
