"""`make operator` (manage.py create_operator): asks in a terminal; from a script it reads the name
and the password from the environment, and without them it fails loudly instead of skipping."""

from __future__ import annotations

import io
import os
import subprocess
import sys
from pathlib import Path

import pytest
from django.contrib.auth import get_user_model
from django.core.management import CommandError, call_command
from django.db import connection

ROOT = Path(__file__).resolve().parents[2]
PASSWORD = "a-long-operator-passphrase-42"


def _env(**extra: str) -> dict:
    env = {k: v for k, v in os.environ.items() if not k.startswith("DJANGO_SUPERUSER_")}
    env.update(PYTHONPATH=str(ROOT), DJANGO_SETTINGS_MODULE="mediator_project.settings_test", **extra)
    return env


@pytest.mark.django_db(transaction=True)
def test_fed_from_a_pipe_without_credentials_it_fails_with_a_non_zero_exit_and_says_what_to_set():
    # The command runs in its own process, on the suite's test database.
    db = connection.settings_dict
    result = subprocess.run(
        [sys.executable, "manage.py", "create_operator"],
        cwd=ROOT,
        env=_env(TEST_DATABASE_URL=f"postgresql://{db['USER']}@{db['HOST']}:{db['PORT']}/{db['NAME']}"),
        input="olivia\n",
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert result.returncode != 0
    assert "skipped" not in result.stdout + result.stderr
    assert "DJANGO_SUPERUSER_USERNAME" in result.stderr and "DJANGO_SUPERUSER_PASSWORD" in result.stderr
    assert not get_user_model().objects.exists()


@pytest.mark.django_db
def test_without_a_terminal_it_creates_the_operator_from_the_environment(monkeypatch):
    monkeypatch.setenv("DJANGO_SUPERUSER_USERNAME", "olivia")
    monkeypatch.setenv("DJANGO_SUPERUSER_PASSWORD", PASSWORD)
    monkeypatch.setenv("DJANGO_SUPERUSER_EMAIL", "")
    call_command("create_operator", stdin=io.StringIO(""), stdout=io.StringIO())
    user = get_user_model().objects.get(username="olivia")
    assert user.is_superuser and user.is_staff and user.check_password(PASSWORD)


@pytest.mark.django_db
def test_a_username_flag_with_the_password_in_the_environment_is_enough(monkeypatch):
    monkeypatch.delenv("DJANGO_SUPERUSER_USERNAME", raising=False)
    monkeypatch.setenv("DJANGO_SUPERUSER_PASSWORD", PASSWORD)
    monkeypatch.setenv("DJANGO_SUPERUSER_EMAIL", "")
    call_command("create_operator", "--username", "olivia", "--noinput", stdin=io.StringIO(""), stdout=io.StringIO())
    assert get_user_model().objects.get(username="olivia").check_password(PASSWORD)


@pytest.mark.django_db
@pytest.mark.parametrize(
    ("env", "says"),
    [
        ({"DJANGO_SUPERUSER_USERNAME": "olivia"}, "Missing: DJANGO_SUPERUSER_PASSWORD"),
        ({"DJANGO_SUPERUSER_PASSWORD": PASSWORD}, "Missing: DJANGO_SUPERUSER_USERNAME"),
        ({"DJANGO_SUPERUSER_USERNAME": "olivia", "DJANGO_SUPERUSER_PASSWORD": "olivia"}, "DJANGO_SUPERUSER_PASSWORD:"),
    ],
)
def test_it_never_creates_an_operator_without_a_usable_password(monkeypatch, env, says):
    for name in ("DJANGO_SUPERUSER_USERNAME", "DJANGO_SUPERUSER_PASSWORD"):
        monkeypatch.delenv(name, raising=False)
    for name, value in env.items():
        monkeypatch.setenv(name, value)
    with pytest.raises(CommandError, match=says):
        call_command("create_operator", "--noinput", stdin=io.StringIO(""), stdout=io.StringIO())
    assert not get_user_model().objects.exists()
