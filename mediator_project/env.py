"""Environment helpers: a secret comes from NAME or from the file at NAME_FILE (docs/contributing.md §12); the
Redis deployment's forms (a URL, or Sentinel)."""

from __future__ import annotations

import os
from typing import overload
from urllib.parse import parse_qsl, urlsplit

from django.core.exceptions import ImproperlyConfigured


@overload
def env(name: str, default: str) -> str: ...
@overload
def env(name: str, default: None = None) -> str | None: ...
def env(name: str, default: str | None = None) -> str | None:
    """Value of NAME, else the contents of the file NAME_FILE, else `default`."""
    if name in os.environ:
        return os.environ[name]
    path = os.environ.get(f"{name}_FILE")
    if path:
        try:
            with open(path, encoding="utf-8") as fh:
                return fh.read().strip()
        except OSError as exc:
            raise ImproperlyConfigured(f"{name}_FILE={path} cannot be read: {exc}") from exc
    return default


def env_bool(name: str, default: bool) -> bool:
    value = env(name)
    if value is None:
        return default
    return value.strip().lower() in ("1", "true", "yes", "on")


def env_int(name: str, default: int) -> int:
    value = env(name)
    if value is None or value == "":
        return default
    try:
        return int(value)
    except ValueError as exc:
        raise ImproperlyConfigured(f"{name} must be an integer, got {value!r}") from exc


def celery_broker_url(redis_url: str) -> str:
    """Celery's broker URL for the deployment's REDIS_URL. A Redis on this machine is best reached
    over its Unix socket (docs/serving.md): redis-py, the channel layer and the rate limits take
    `unix:///path/redis.sock?db=N` as it is, but kombu has no `unix://` transport; its form is
    `redis+socket:///path/redis.sock?virtual_host=N`. Any other URL is Celery's as it is."""
    parts = urlsplit(redis_url)
    if parts.scheme != "unix":
        return redis_url
    query = dict(parse_qsl(parts.query, keep_blank_values=True))
    db = query.pop("db", None)
    if query:
        raise ImproperlyConfigured(
            f"REDIS_URL: a unix:// URL may carry only ?db= for Celery (got {', '.join(sorted(query))}); "
            "set CELERY_BROKER_URL (redis+socket://…) yourself"
        )
    if db is not None and not db.isdigit():
        raise ImproperlyConfigured(f"REDIS_URL: db must be a number, got {db!r}")
    return f"redis+socket://{parts.netloc}{parts.path}" + (f"?virtual_host={db}" if db is not None else "")
