"""Build the embedded-default SQLite database for the SQLite job test, in its own process:

    python -m tests.usage.sqlite_fixture /tmp/x/mediator.sqlite3

Migrates with the real settings (SQLite in WAL mode), creates tenants a and b, writes the shared
dataset through the ORM and prints {"a": id, "b": id} as JSON.
"""

from __future__ import annotations

import json
import os
import sys
from pathlib import Path


def main(path: str) -> None:
    os.environ["DJANGO_SETTINGS_MODULE"] = "mediator_project.settings"
    os.environ["DATABASE_URL"] = f"sqlite:///{path}"
    os.environ["MEDIATOR_VAR_DIR"] = str(Path(path).parent)
    os.environ["USAGE_METERING_MODE"] = "off"
    import django

    django.setup()
    from django.core.management import call_command

    call_command("migrate", verbosity=0, interactive=False)
    from apps.tenants.services import tenant_create

    from . import dataset

    tenants = {k: tenant_create(slug=f"tenant-{k}", domain=f"{k}.mediator.test", name=k) for k in ("a", "b")}
    dataset.write_orm(dataset.build(["a", "b"]), tenants)
    print(json.dumps({k: t.pk for k, t in tenants.items()}))


if __name__ == "__main__":
    main(sys.argv[1])
