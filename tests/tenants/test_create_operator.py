"""`make operator` (manage.py create_operator): asks in a terminal (name, optional email, password
twice, as the README says); from a script it reads the name and the password from the environment,
the email being optional, and without them it fails loudly instead of skipping."""

from __future__ import annotations

import io
import os
import subprocess
import sys
from pathlib import Path

import pexpect
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
    result = subprocess.run(
        [sys.executable, "manage.py", "create_operator"],
        cwd=ROOT,
        env=_test_database_env(),
        input="olivia\n",
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert result.returncode != 0
    assert "skipped" not in result.stdout + result.stderr
    assert "DJANGO_SUPERUSER_USERNAME" in result.stderr and "DJANGO_SUPERUSER_PASSWORD" in result.stderr
    assert not get_user_model().objects.exists()


def _test_database_env(**extra: str) -> dict:
    """The environment of a command run in its own process, on the suite's test database."""
    db = connection.settings_dict
    return _env(TEST_DATABASE_URL=f"postgresql://{db['USER']}@{db['HOST']}:{db['PORT']}/{db['NAME']}", **extra)


@pytest.mark.django_db(transaction=True)
def test_the_readmes_script_invocation_creates_the_operator_without_an_email():
    # README: DJANGO_SUPERUSER_USERNAME=olivia DJANGO_SUPERUSER_PASSWORD=... make operator </dev/null
    # (make runs `manage.py create_operator` once migrated); no DJANGO_SUPERUSER_EMAIL anywhere.
    result = subprocess.run(
        [sys.executable, "manage.py", "create_operator"],
        cwd=ROOT,
        env=_test_database_env(DJANGO_SUPERUSER_USERNAME="olivia", DJANGO_SUPERUSER_PASSWORD=PASSWORD),
        stdin=subprocess.DEVNULL,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert (result.returncode, result.stderr) == (0, "")
    assert result.stdout == "Superuser created successfully.\n"
    user = get_user_model().objects.get(username="olivia")
    assert (user.is_superuser, user.is_staff, user.email, user.check_password(PASSWORD)) == (True, True, "", True)


@pytest.mark.django_db(transaction=True)
def test_in_a_terminal_it_asks_a_name_an_optional_email_and_the_password_twice_and_refuses_a_weak_one():
    # The walk the README describes, in a real pseudo-terminal: Enter skips the email; a password the
    # validators refuse is explained and Django offers to bypass them, N (the default) asks again.
    child = pexpect.spawn(
        sys.executable,
        ["manage.py", "create_operator"],
        cwd=str(ROOT),
        env=_test_database_env(),
        encoding="utf-8",
        timeout=120,
    )
    try:
        child.expect_exact("Username (leave blank to use ")
        child.sendline("olivia")
        child.expect_exact("Email address: ")
        child.sendline("")
        for password in ("olivia", PASSWORD):
            child.expect_exact("Password: ")
            child.sendline(password)
            child.expect_exact("Password (again): ")
            child.sendline(password)
            if password == "olivia":
                child.expect_exact("This password is too short. It must contain at least 8 characters.")
                child.expect_exact("Bypass password validation and create user anyway? [y/N]: ")
                child.sendline("")
        child.expect_exact("Superuser created successfully.")
        child.expect(pexpect.EOF)
    finally:
        child.close()
    assert child.exitstatus == 0
    user = get_user_model().objects.get(username="olivia")
    assert (user.is_superuser, user.email, user.check_password(PASSWORD)) == (True, "", True)


@pytest.mark.django_db
def test_without_a_terminal_it_creates_the_operator_from_the_environment(monkeypatch):
    monkeypatch.setenv("DJANGO_SUPERUSER_USERNAME", "olivia")
    monkeypatch.setenv("DJANGO_SUPERUSER_PASSWORD", PASSWORD)
    monkeypatch.delenv("DJANGO_SUPERUSER_EMAIL", raising=False)
    call_command("create_operator", stdin=io.StringIO(""), stdout=io.StringIO())
    user = get_user_model().objects.get(username="olivia")
    assert user.is_superuser and user.is_staff and user.check_password(PASSWORD) and user.email == ""


@pytest.mark.django_db
def test_a_username_flag_with_the_password_in_the_environment_is_enough(monkeypatch):
    monkeypatch.delenv("DJANGO_SUPERUSER_USERNAME", raising=False)
    monkeypatch.delenv("DJANGO_SUPERUSER_EMAIL", raising=False)
    monkeypatch.setenv("DJANGO_SUPERUSER_PASSWORD", PASSWORD)
    call_command("create_operator", "--username", "olivia", "--noinput", stdin=io.StringIO(""), stdout=io.StringIO())
    assert get_user_model().objects.get(username="olivia").check_password(PASSWORD)


@pytest.mark.django_db
def test_an_email_given_in_the_environment_is_kept(monkeypatch):
    monkeypatch.setenv("DJANGO_SUPERUSER_USERNAME", "olivia")
    monkeypatch.setenv("DJANGO_SUPERUSER_PASSWORD", PASSWORD)
    monkeypatch.setenv("DJANGO_SUPERUSER_EMAIL", "olivia@ops.test")
    call_command("create_operator", stdin=io.StringIO(""), stdout=io.StringIO())
    assert get_user_model().objects.get(username="olivia").email == "olivia@ops.test"


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
