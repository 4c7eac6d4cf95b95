"""One env-driven settings module (docs/contributing.md §12). The embedded default needs no environment at all:
the embedded PostgreSQL (scripts/with_postgres.py), the in-memory channel layer and a generated development deployment key.
Production sets MEDIATOR_ENV=production, which makes every missing secret a loud failure.
"""

from __future__ import annotations

import ipaddress
import json
import os
import re
import secrets
from pathlib import Path
from typing import Any
from urllib.parse import quote

import dj_database_url
from django.core.exceptions import ImproperlyConfigured

from apps.ops.redisconn import redis_sentinel
from apps.wire.display import UTC_FORMAT

from .env import celery_broker_url, env, env_bool, env_int

BASE_DIR = Path(__file__).resolve().parent.parent
VAR_DIR = Path(env("MEDIATOR_VAR_DIR", str(BASE_DIR / "var")))
PRODUCTION = env("MEDIATOR_ENV", "development") == "production"


def _dev_secret(filename: str, nbytes: int) -> str:
    """Development only: a secret generated once and kept in var/ so restarts keep working."""
    VAR_DIR.mkdir(parents=True, exist_ok=True)
    path = VAR_DIR / filename
    if not path.exists():
        # Created 0600 (never readable by others, not even between writing and a chmod).
        try:
            fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
        except FileExistsError:  # another process created it meanwhile
            pass
        else:
            with os.fdopen(fd, "w") as out:
                out.write(secrets.token_hex(nbytes))
    return path.read_text().strip()


def _required(name: str, dev_file: str, nbytes: int) -> str:
    value = env(name)
    if value:
        return value
    if PRODUCTION:
        raise ImproperlyConfigured(f"{name} (or {name}_FILE) must be set in production")
    return _dev_secret(dev_file, nbytes)


SECRET_KEY = _required("DJANGO_SECRET_KEY", "django-secret.key", 32)
# 32-byte key (hex) that encrypts tenant private keys at rest (apps/tenants/keystore.py).
MEDIATOR_DEPLOYMENT_KEY = _required("MEDIATOR_DEPLOYMENT_KEY", "deployment.key", 32)
_NEW_SECRET = "python -c 'import secrets; print(secrets.token_hex(32))'"
if PRODUCTION and not re.fullmatch(r"[0-9a-fA-F]{64}", MEDIATOR_DEPLOYMENT_KEY):
    # Anything else would be hashed as a passphrase (unsalted): a guessable key for every tenant's keys.
    raise ImproperlyConfigured(
        f"MEDIATOR_DEPLOYMENT_KEY must be 64 hex characters (32 bytes) in production: {_NEW_SECRET}"
    )
# Weak as Django's own check (security.W009) says: under 50 characters, under 5 distinct ones, or
# Django's generated development prefix.
if PRODUCTION and (len(SECRET_KEY) < 50 or len(set(SECRET_KEY)) < 5 or SECRET_KEY.startswith("django-insecure-")):
    raise ImproperlyConfigured(
        f"DJANGO_SECRET_KEY is weak: production needs 50 or more characters, 5 or more of them distinct: {_NEW_SECRET}"
    )
DEBUG = env_bool("DJANGO_DEBUG", not PRODUCTION)
if PRODUCTION and DEBUG:
    # Debug pages list the URL map, and a 500 shows settings (DATABASE_URL) and a traceback.
    raise ImproperlyConfigured("DJANGO_DEBUG must be off with MEDIATOR_ENV=production")
# Tenants own their hosts: the tenant middleware decides which Host is served (docs/protocol-readings.md §7).
ALLOWED_HOSTS = ["*"]

INSTALLED_APPS = [
    "daphne",
    # The operator console's theme; it must come before django.contrib.admin.
    "unfold",
    "django.contrib.admin",
    "django.contrib.auth",
    "django.contrib.contenttypes",
    "django.contrib.sessions",
    "django.contrib.messages",
    "django.contrib.staticfiles",
    "channels",
    "rest_framework",
    "drf_spectacular",
    "drf_spectacular_sidecar",
    "apps.tenants",
    "apps.messaging",
    "apps.realtime",
    "apps.usage",
    "apps.push",
    "apps.decentrl",
    "apps.didcomm",
    "apps.ops",
    "apps.console",
]

MIDDLEWARE = [
    "apps.decentrl.middleware.CorsMiddleware",
    "django.middleware.security.SecurityMiddleware",
    "apps.ops.middleware.ContentSecurityPolicyMiddleware",
    "whitenoise.middleware.WhiteNoiseMiddleware",
    "apps.tenants.middleware.OperatorHostMiddleware",
    "apps.tenants.middleware.TenantMiddleware",
    "django.contrib.sessions.middleware.SessionMiddleware",
    "django.middleware.common.CommonMiddleware",
    "django.middleware.csrf.CsrfViewMiddleware",
    "django.contrib.auth.middleware.AuthenticationMiddleware",
    "django.contrib.messages.middleware.MessageMiddleware",
    "django.middleware.clickjacking.XFrameOptionsMiddleware",
]

ROOT_URLCONF = "mediator_project.urls"
APPEND_SLASH = False

TEMPLATES = [
    {
        "BACKEND": "django.template.backends.django.DjangoTemplates",
        "DIRS": [BASE_DIR / "templates"],
        "APP_DIRS": True,
        "OPTIONS": {
            "context_processors": [
                "django.template.context_processors.request",
                "django.contrib.auth.context_processors.auth",
                "django.contrib.messages.context_processors.messages",
            ],
        },
    },
]

WSGI_APPLICATION = "mediator_project.wsgi.application"
ASGI_APPLICATION = "mediator_project.asgi.application"

# Without DATABASE_URL, the embedded PostgreSQL that `make run` starts (scripts/with_postgres.py): its
# data and its Unix socket in var/pg (Django connects there, trusted), and a loopback TCP port of this
# checkout's own for the usage report's JDBC reads (PostgreSQL's JDBC driver reaches no Unix socket),
# where the role's password is required (scram-sha-256). with_postgres.py chooses the port (free) and
# records it in EMBEDDED_PG_TCP_RECORD; the password is generated once into var/pg-password (0600).
# The port also names the socket file (.s.PGSQL.<port>), so the URL carries it.
DATABASE_URL = env("DATABASE_URL") or ""
EMBEDDED_PGDATA = None if DATABASE_URL else VAR_DIR.resolve() / "pg"
EMBEDDED_PG_TCP_RECORD = VAR_DIR.resolve() / "pg-tcp.json"
EMBEDDED_PG_TCP: dict[str, Any] | None = None
if EMBEDDED_PGDATA is not None:
    try:
        _pg_port = int(json.loads(EMBEDDED_PG_TCP_RECORD.read_text())["port"])
    except (OSError, ValueError, KeyError, TypeError):
        _pg_port = 5432  # not started yet: with_postgres.py records the port before running its command
    EMBEDDED_PG_TCP = {"host": "127.0.0.1", "port": _pg_port, "password": _dev_secret("pg-password", 24)}
    DATABASE_URL = f"postgresql://postgres@{quote(str(EMBEDDED_PGDATA), safe='')}:{_pg_port}/mediator"
DATABASES = {"default": dj_database_url.parse(DATABASE_URL, conn_max_age=0)}
# The HTTP tier's application threads are long-lived (Granian, mediator_project/http_server.py;
# make run's Daphne, mediator_project/asgi.py), so there a persistent connection per thread
# (DB_CONN_MAX_AGE seconds, set by scripts/run_production.sh for the HTTP tier only and by
# scripts/run_embedded.sh) saves the pool's checkout and return on every request.
DB_CONN_MAX_AGE = env_int("DB_CONN_MAX_AGE", 0)
if DB_CONN_MAX_AGE > 0:
    DATABASES["default"]["CONN_MAX_AGE"] = DB_CONN_MAX_AGE
else:
    # Elsewhere (production's Daphne for the sockets, Celery, management commands) psycopg's pool
    # bounds the connections per process (DB_POOL_MAX_SIZE) and keeps them warm.
    # Added to the URL's own options (target_session_attrs of a multi-host URL, connect_timeout).
    DATABASES["default"]["OPTIONS"] = {
        **DATABASES["default"].get("OPTIONS", {}),
        "pool": {
            "min_size": env_int("DB_POOL_MIN_SIZE", 2),
            "max_size": env_int("DB_POOL_MAX_SIZE", 16),
            "timeout": env_int("DB_POOL_TIMEOUT_S", 10),
        },
    }
# Never wrap requests in one transaction: a consumed nonce must commit on its own (DCTRL-0004 §5.4).
DATABASES["default"]["ATOMIC_REQUESTS"] = False
DEFAULT_AUTO_FIELD = "django.db.models.BigAutoField"

REDIS_URL = env("REDIS_URL", "")
# Or Redis through Sentinel (docs/serving.md, "Redis through Sentinel"): the sentinels'
# host:port list and the name they monitor the master under, with its database and passwords.
REDIS_SENTINEL = redis_sentinel(
    env("REDIS_SENTINELS", ""),
    env("REDIS_SENTINEL_MASTER", ""),
    env("REDIS_DB", ""),
    env("REDIS_PASSWORD", ""),
    env("REDIS_SENTINEL_PASSWORD", ""),
)
if REDIS_SENTINEL and REDIS_URL:
    raise ImproperlyConfigured("set REDIS_URL or REDIS_SENTINELS, not both")
# Every Redis key of the channel layer starts with this, as do the keys realtime's sync push adapter
# writes (it asks the layer): deployments (or test runs) sharing one Redis database need their own.
MEDIATOR_CHANNEL_LAYER_PREFIX = env("MEDIATOR_CHANNEL_LAYER_PREFIX", "mediator") or ""
if not re.fullmatch(r"[A-Za-z0-9_.:-]{1,64}", MEDIATOR_CHANNEL_LAYER_PREFIX):
    raise ImproperlyConfigured("MEDIATOR_CHANNEL_LAYER_PREFIX: 1-64 of A-Z a-z 0-9 _ . : -")
# Both layers forget a group member this long after it joined; every open socket re-joins its groups
# every quarter of it (apps/realtime/groups.Memberships), so the expiry only drops dead channels.
MEDIATOR_CHANNEL_GROUP_EXPIRY_S = env_int("MEDIATOR_CHANNEL_GROUP_EXPIRY_S", 86400)
if MEDIATOR_CHANNEL_GROUP_EXPIRY_S < 4:
    raise ImproperlyConfigured("MEDIATOR_CHANNEL_GROUP_EXPIRY_S must be 4 or more")
if REDIS_URL or REDIS_SENTINEL:
    # redis-py 8 defaults to a 5 s socket timeout and 100 connections per pool. The first races
    # channels_redis's 5 s BZPOPMIN (sockets died with "Timeout reading"), the second fails bursts
    # of group joins (MaxConnectionsError); both killed live sockets.
    _layer_options = {"socket_timeout": 30, "socket_connect_timeout": 5, "max_connections": 2000}
    CHANNEL_LAYERS: dict[str, dict[str, Any]] = {
        "default": {
            "BACKEND": "channels_redis.core.RedisChannelLayer",
            "CONFIG": {
                "hosts": [
                    REDIS_SENTINEL.channel_layer_host(**_layer_options)
                    if REDIS_SENTINEL
                    else {"address": REDIS_URL, **_layer_options}
                ],
                "prefix": MEDIATOR_CHANNEL_LAYER_PREFIX,
                "group_expiry": MEDIATOR_CHANNEL_GROUP_EXPIRY_S,
                "capacity": 1000,
                "expiry": 30,
            },
        }
    }
else:
    # One process: no prefix to keep apart, the same group expiry as Redis (its group_send drops
    # members that joined longer ago, as channels_redis does).
    CHANNEL_LAYERS = {
        "default": {
            "BACKEND": "channels.layers.InMemoryChannelLayer",
            "CONFIG": {"group_expiry": MEDIATOR_CHANNEL_GROUP_EXPIRY_S},
        }
    }

# --- Celery -------------------------------------------------------------------------------------
# The filesystem broker names a host it ignores: without one kombu warns "No hostname was supplied"
# on every connection (twice per `make run` start).
CELERY_BROKER_URL = env("CELERY_BROKER_URL", "") or (
    REDIS_SENTINEL.celery_broker()[0]
    if REDIS_SENTINEL
    else celery_broker_url(REDIS_URL)
    if REDIS_URL
    else "filesystem://localhost/"
)
if REDIS_SENTINEL and CELERY_BROKER_URL.startswith("sentinel://"):
    # kombu's sentinel transport: the master's name (and the sentinels' password) as options.
    CELERY_BROKER_TRANSPORT_OPTIONS = REDIS_SENTINEL.celery_broker()[1]
if CELERY_BROKER_URL.startswith("filesystem://"):
    _broker_dir = VAR_DIR / "celery-broker"
    for _sub in ("in", "processed", "control"):
        (_broker_dir / _sub).mkdir(parents=True, exist_ok=True)
    CELERY_BROKER_TRANSPORT_OPTIONS = {
        # kombu's default control folder is ./control in the working directory: keep it in var/.
        "control_folder": str(_broker_dir / "control"),
        "data_folder_in": str(_broker_dir / "in"),
        "data_folder_out": str(_broker_dir / "in"),
        "processed_folder": str(_broker_dir / "processed"),
        "store_processed": False,
        # How often the worker looks for a new task file (kombu's default: every second). A report
        # requested on the console waited up to that long for its worker; a folder listing ten
        # times a second costs next to nothing.
        "polling_interval": 0.1,
    }
CELERY_RESULT_BACKEND = None
CELERY_TASK_IGNORE_RESULT = True
CELERY_TIMEZONE = "UTC"
CELERY_BEAT_SCHEDULE_FILENAME = str(VAR_DIR / "celerybeat-schedule")
# Maintenance jobs are idempotent, so a job lost with a dying worker is simply redone: ack late.
CELERY_TASK_ACKS_LATE = True
CELERY_WORKER_PREFETCH_MULTIPLIER = 1
CELERY_TASK_SOFT_TIME_LIMIT = env_int("CELERY_TASK_SOFT_TIME_LIMIT", 600)
CELERY_TASK_TIME_LIMIT = env_int("CELERY_TASK_TIME_LIMIT", 900)
CELERY_BROKER_CONNECTION_RETRY_ON_STARTUP = True
# The worker logs through LOGGING below (its formatters escape control characters), not through
# handlers of its own on the root logger.
CELERY_WORKER_HIJACK_ROOT_LOGGER = False

# --- Abuse limits (docs/protocol-readings.md §7, docs/operations.md) -----------------------------------
# Per minute; 0 switches a limit off; tenants override the per-DID and per-IP ones. Per sender
# DID: a sliding window, the limit that stops one abusive client. Per IP: a token bucket, a
# sustained rate with bursts of up to _BURST at once, as hosted mediators set it (100 a second
# with bursts of 50: carrier NAT puts thousands of phones behind one address, and one wallet's
# onboarding is a burst).
MEDIATOR_RATE_LIMIT_PER_DID = env_int("MEDIATOR_RATE_LIMIT_PER_DID", 60)
MEDIATOR_RATE_LIMIT_PER_IP = env_int("MEDIATOR_RATE_LIMIT_PER_IP", 6000)
MEDIATOR_RATE_LIMIT_PER_IP_BURST = env_int("MEDIATOR_RATE_LIMIT_PER_IP_BURST", 50)
# DIDComm (v2 and v1): per authcrypt sender and per IP (with its burst), per minute; tenants
# override them in their DIDComm policy (null = these, 0 = off).
MEDIATOR_DIDCOMM_RATE_LIMIT_PER_SENDER = env_int("MEDIATOR_DIDCOMM_RATE_LIMIT_PER_SENDER", 60)
MEDIATOR_DIDCOMM_RATE_LIMIT_PER_IP = env_int("MEDIATOR_DIDCOMM_RATE_LIMIT_PER_IP", 6000)
MEDIATOR_DIDCOMM_RATE_LIMIT_PER_IP_BURST = env_int("MEDIATOR_DIDCOMM_RATE_LIMIT_PER_IP_BURST", 50)
# DIDComm v2 replay protection (docs/didcomm.md "Replays"): an authcrypt message other than a forward
# whose id its sender already used is refused; ids are remembered this long (seconds), and a message
# whose created_time is further than this from now is refused (its id may be forgotten).
MEDIATOR_DIDCOMM_REPLAY_WINDOW_S = env_int("MEDIATOR_DIDCOMM_REPLAY_WINDOW_S", 3600)
# DIDComm v1 outbound POSTs (to an agent's endpoint from its DID document; ACA-Py never asks for
# a return route). Private, loopback, link-local and other non-global targets are refused unless
# this is on (the test suite turns it on: its agents listen on 127.0.0.1). The Celery queue of the
# delivery task, the per-request timeout and the retry backoff cap (seconds).
MEDIATOR_DIDCOMM_OUTBOUND_ALLOW_PRIVATE = env_bool("MEDIATOR_DIDCOMM_OUTBOUND_ALLOW_PRIVATE", False)
# Loopback targets only (an agent on the developer's machine): on by default in development
# (`make run`), off in production.
MEDIATOR_DIDCOMM_OUTBOUND_ALLOW_LOOPBACK = env_bool("MEDIATOR_DIDCOMM_OUTBOUND_ALLOW_LOOPBACK", not PRODUCTION)
MEDIATOR_DIDCOMM_OUTBOUND_QUEUE = env("MEDIATOR_DIDCOMM_OUTBOUND_QUEUE", "celery")
MEDIATOR_DIDCOMM_OUTBOUND_TIMEOUT_SECONDS = env_int("MEDIATOR_DIDCOMM_OUTBOUND_TIMEOUT_SECONDS", 10)
MEDIATOR_DIDCOMM_OUTBOUND_MAX_BACKOFF_SECONDS = env_int("MEDIATOR_DIDCOMM_OUTBOUND_MAX_BACKOFF_SECONDS", 3600)
# Push providers' base URLs (docs/push.md, "Providers"): the real services by default; the tests
# point them at their loopback stand-ins. FCM's OAuth token URL is the service account's token_uri,
# Web Push's the subscription's endpoint, which must be https unless PUSH_WEBPUSH_ALLOW_HTTP (tests).
PUSH_FCM_URL = env("PUSH_FCM_URL", "https://fcm.googleapis.com")
PUSH_APNS_URL = env("PUSH_APNS_URL", "https://api.push.apple.com")
PUSH_APNS_SANDBOX_URL = env("PUSH_APNS_SANDBOX_URL", "https://api.sandbox.push.apple.com")
PUSH_WEBPUSH_ALLOW_HTTP = env_bool("PUSH_WEBPUSH_ALLOW_HTTP", False)
# A webhook provider's URL must be https unless this is on (tests: a loopback stand-in).
PUSH_WEBHOOK_ALLOW_HTTP = env_bool("PUSH_WEBHOOK_ALLOW_HTTP", False)
# Wakes (docs/push.md, "When a wake leaves"): at most one per subject between two pickups, and no
# closer together than this many seconds. A send the provider asks to retry waits
# PUSH_RETRY_BASE_S * 2^attempt with jitter (or its Retry-After), at most PUSH_RETRY_CAP_S, for at
# most PUSH_RETRY_MAX_ATTEMPTS attempts; the wake tasks run on the Celery queue PUSH_QUEUE, which
# the production layouts give a worker of its own (docs/push.md, "The worker").
PUSH_WAKE_INTERVAL_S = env_int("PUSH_WAKE_INTERVAL_S", 60)
PUSH_RETRY_BASE_S = env_int("PUSH_RETRY_BASE_S", 5)
PUSH_RETRY_CAP_S = env_int("PUSH_RETRY_CAP_S", 900)
PUSH_RETRY_MAX_ATTEMPTS = env_int("PUSH_RETRY_MAX_ATTEMPTS", 8)
PUSH_QUEUE = env("PUSH_QUEUE", "push")
if PUSH_WAKE_INTERVAL_S < 0 or PUSH_RETRY_BASE_S < 1 or PUSH_RETRY_CAP_S < PUSH_RETRY_BASE_S:
    raise ImproperlyConfigured(
        "PUSH_WAKE_INTERVAL_S >= 0, PUSH_RETRY_BASE_S >= 1, PUSH_RETRY_CAP_S >= PUSH_RETRY_BASE_S"
    )
# /ws and /didcomm/ws upgrades, and /ws AUTHENTICATE attempts, per IP: token buckets too, per minute
# sustained with bursts of up to _BURST. When a node or the network fails, every socket behind one
# address (carrier NAT: many wallets) reconnects at once; a burst lets them back in.
MEDIATOR_WS_CONNECT_PER_IP = env_int("MEDIATOR_WS_CONNECT_PER_IP", 600)
MEDIATOR_WS_CONNECT_PER_IP_BURST = env_int("MEDIATOR_WS_CONNECT_PER_IP_BURST", 100)
MEDIATOR_WS_AUTH_PER_IP = env_int("MEDIATOR_WS_AUTH_PER_IP", 600)
MEDIATOR_WS_AUTH_PER_IP_BURST = env_int("MEDIATOR_WS_AUTH_PER_IP_BURST", 100)
for _name in (
    "MEDIATOR_RATE_LIMIT_PER_IP_BURST",
    "MEDIATOR_DIDCOMM_RATE_LIMIT_PER_IP_BURST",
    "MEDIATOR_WS_CONNECT_PER_IP_BURST",
    "MEDIATOR_WS_AUTH_PER_IP_BURST",
):
    if globals()[_name] < 1:
        raise ImproperlyConfigured(f"{_name} must be 1 or more (a per-IP rate of 0 switches the limit off)")
# Windows are shared by every process through this Redis; empty = in-process (embedded default).
MEDIATOR_RATE_LIMIT_REDIS_URL = env("MEDIATOR_RATE_LIMIT_REDIS_URL", REDIS_URL) or ""
# With REDIS_SENTINELS and no MEDIATOR_RATE_LIMIT_REDIS_URL of their own, the limits use that master.
MEDIATOR_RATE_LIMIT_REDIS_SENTINEL = None if env("MEDIATOR_RATE_LIMIT_REDIS_URL") is not None else REDIS_SENTINEL
MEDIATOR_RATE_LIMIT_PREFIX = env("MEDIATOR_RATE_LIMIT_PREFIX", "mediator:rl")
# How long a limit check waits for that Redis before it fails open (allows, logs the outage once).
MEDIATOR_RATE_LIMIT_REDIS_TIMEOUT_MS = env_int("MEDIATOR_RATE_LIMIT_REDIS_TIMEOUT_MS", 500)
# Reverse proxies (CIDRs, comma-separated) whose X-Forwarded-For names the client for per-IP
# limits; e.g. "127.0.0.1/32" behind the nginx of scripts/run_production.sh. Empty = the peer.
MEDIATOR_TRUSTED_PROXIES = [p.strip() for p in (env("MEDIATOR_TRUSTED_PROXIES", "") or "").split(",") if p.strip()]
# Expired contracts stay listed this long before the scheduled purge removes them.
MEDIATOR_EXPIRED_CONTRACT_RETENTION_DAYS = env_int("MEDIATOR_EXPIRED_CONTRACT_RETENTION_DAYS", 30)

# --- Metrics (GET /metrics) ---------------------------------------------------------------------
# A bearer token, and/or internal (loopback/private) addresses. Several processes add up their
# counters through PROMETHEUS_MULTIPROC_DIR (an empty directory per deployment start).
MEDIATOR_METRICS_TOKEN = env("MEDIATOR_METRICS_TOKEN", "") or ""
MEDIATOR_METRICS_ALLOW_INTERNAL = env_bool("MEDIATOR_METRICS_ALLOW_INTERNAL", True)
MEDIATOR_METRICS_INTERNAL_NETWORKS = [
    n.strip()
    for n in (
        env("MEDIATOR_METRICS_INTERNAL_NETWORKS", "")
        or "127.0.0.0/8,::1/128,10.0.0.0/8,172.16.0.0/12,192.168.0.0/16,fc00::/7"
    ).split(",")
    if n.strip()
]
for _net in MEDIATOR_TRUSTED_PROXIES + MEDIATOR_METRICS_INTERNAL_NETWORKS:
    try:
        ipaddress.ip_network(_net, strict=False)
    except ValueError as _exc:
        raise ImproperlyConfigured(f"not an IP network: {_net!r} ({_exc})") from _exc
if os.environ.get("PROMETHEUS_MULTIPROC_DIR"):
    Path(os.environ["PROMETHEUS_MULTIPROC_DIR"]).mkdir(parents=True, exist_ok=True)

AUTH_PASSWORD_VALIDATORS = [
    {"NAME": "django.contrib.auth.password_validation.MinimumLengthValidator"},
]

LANGUAGE_CODE = "en-us"
TIME_ZONE = "UTC"
USE_I18N = True
USE_TZ = True
# One time format everywhere (apps/wire/display.py): ISO 8601 in UTC with a Z, in the console's
# lists and forms (these format modules), the dashboard and the API (DATETIME_FORMAT below).
FORMAT_MODULE_PATH = ["mediator_project.formats"]

STATIC_URL = "static/"
STATIC_ROOT = VAR_DIR / "static"
STATIC_ROOT.mkdir(parents=True, exist_ok=True)
WHITENOISE_USE_FINDERS = True

# --- Mediator protocol settings ---------------------------------------------------------------
PORT = env_int("PORT", 8000)
# The tenant served for hosts no tenant claims (development). Empty in production means
# UNKNOWN_MEDIATOR for unknown hosts (docs/protocol-readings.md §7).
MEDIATOR_DEFAULT_TENANT = env("MEDIATOR_DEFAULT_TENANT", "" if PRODUCTION else "default")
MEDIATOR_PUBLIC_SCHEME = env("MEDIATOR_PUBLIC_SCHEME", "https" if PRODUCTION else "http")
# --- Served over TLS (MEDIATOR_PUBLIC_SCHEME=https, the production default; docs/serving.md) ------
# Session and CSRF cookies are Secure, and a secure request gets HSTS (a year unless
# MEDIATOR_HSTS_SECONDS says otherwise; 0 = none). A request is secure when a trusted proxy says
# so: the layout's nginx sets X-Forwarded-Proto to the public scheme (it terminates no TLS
# itself), and Granian and Daphne listen on 127.0.0.1 only, behind it.
_TLS = MEDIATOR_PUBLIC_SCHEME == "https"
SESSION_COOKIE_SECURE = CSRF_COOKIE_SECURE = _TLS
SECURE_HSTS_SECONDS = env_int("MEDIATOR_HSTS_SECONDS", 31_536_000 if _TLS else 0)
SECURE_PROXY_SSL_HEADER = ("HTTP_X_FORWARDED_PROTO", "https") if MEDIATOR_TRUSTED_PROXIES else None
MEDIATOR_TIMESTAMP_WINDOW_MS = env_int("MEDIATOR_TIMESTAMP_WINDOW_MS", 300_000)
MEDIATOR_MAX_BODY_BYTES = env_int("MEDIATOR_MAX_BODY_BYTES", 6 * 1024 * 1024)
# The command path's statements are prepared on PostgreSQL (server-side binding,
# apps/messaging/sql.py). Operators set 0 behind a transaction-mode pooler that cannot keep
# prepared statements (docs/operations.md). It changes how a statement is sent, not which runs.
DB_PREPARED_STATEMENTS = env_bool("DB_PREPARED_STATEMENTS", True)
MEDIATOR_CORS_ORIGINS = [o.strip() for o in (env("MEDIATOR_CORS_ORIGINS", "*") or "*").split(",") if o.strip()]
# Django refuses bigger bodies before our view sees them; we map that to PAYLOAD_TOO_LARGE.
DATA_UPLOAD_MAX_MEMORY_SIZE = MEDIATOR_MAX_BODY_BYTES
# /ws (DCTRL-0004 §10.1, §10.4): AUTHENTICATE deadline and PING interval, in seconds (floats
# allowed, so tests can shorten them).
MEDIATOR_WS_AUTH_TIMEOUT_S = float(env("MEDIATOR_WS_AUTH_TIMEOUT_S", "10") or "10")
MEDIATOR_WS_PING_INTERVAL_S = float(env("MEDIATOR_WS_PING_INTERVAL_S", "30") or "30")
# /didcomm/ws: a socket with no live client is closed (4408) once this many seconds passed without
# a frame the mediator accepted (apps/didcomm/consumers.py; 0 = never).
MEDIATOR_DIDCOMM_WS_IDLE_TIMEOUT_S = float(env("MEDIATOR_DIDCOMM_WS_IDLE_TIMEOUT_S", "60") or "60")
if MEDIATOR_DIDCOMM_WS_IDLE_TIMEOUT_S < 0:
    raise ImproperlyConfigured("MEDIATOR_DIDCOMM_WS_IDLE_TIMEOUT_S must be 0 or more")
# /didcomm/ws: a live delivery still queued this many seconds after its push (no messages-received)
# is announced unacknowledged and pushed again on that socket (apps/didcomm/live.py; 0 = never;
# it stays queued either way). docs/didcomm.md "Live deliveries are acknowledged".
MEDIATOR_DIDCOMM_LIVE_ACK_TIMEOUT_S = float(env("MEDIATOR_DIDCOMM_LIVE_ACK_TIMEOUT_S", "30") or "30")
if MEDIATOR_DIDCOMM_LIVE_ACK_TIMEOUT_S < 0:
    raise ImproperlyConfigured("MEDIATOR_DIDCOMM_LIVE_ACK_TIMEOUT_S must be 0 or more")
# How long an open socket vouches for its DID's presence (apps/messaging/presence.py): a stored
# event is pushed only to a DID with a socket open, renewed every third of this; a socket tier that
# died without closing its sockets stops vouching this long after (its DIDs are pushed to meanwhile).
MEDIATOR_WS_PRESENCE_LEASE_S = env_int("MEDIATOR_WS_PRESENCE_LEASE_S", 1800)
if MEDIATOR_WS_PRESENCE_LEASE_S < 3:
    raise ImproperlyConfigured("MEDIATOR_WS_PRESENCE_LEASE_S must be 3 seconds or more")
# Bytes a socket may have queued and not yet taken by its peer before a push closes it (4509);
# the backlog waits for room instead (apps/realtime/sendbudget.py, docs/realtime.md).
MEDIATOR_WS_SEND_BUDGET_BYTES = env_int("MEDIATOR_WS_SEND_BUDGET_BYTES", 4 * 1024 * 1024)
if MEDIATOR_WS_SEND_BUDGET_BYTES < 0:
    raise ImproperlyConfigured("MEDIATOR_WS_SEND_BUDGET_BYTES must be 0 or more")
# A socket server process's capacity by policy (apps/realtime/admission.py, docs/realtime.md
# "Capacity"): over either cap (0 = none) a new socket of either front door is refused at once with
# its protocol's MEDIATOR_UNAVAILABLE answer and close 1013, whose reason says to retry in
# MEDIATOR_WS_RETRY_AFTER_S; admission's database work runs on MEDIATOR_WS_DB_THREADS threads (0 =
# the process's one thread-sensitive thread). Each thread holds a connection of DB_POOL_MAX_SIZE.
MEDIATOR_WS_MAX_SOCKETS = env_int("MEDIATOR_WS_MAX_SOCKETS", 0)
MEDIATOR_WS_MAX_ADMITTING = env_int("MEDIATOR_WS_MAX_ADMITTING", 500)
MEDIATOR_WS_RETRY_AFTER_S = env_int("MEDIATOR_WS_RETRY_AFTER_S", 5)
MEDIATOR_WS_DB_THREADS = env_int("MEDIATOR_WS_DB_THREADS", 8)
for _name in (
    "MEDIATOR_WS_MAX_SOCKETS",
    "MEDIATOR_WS_MAX_ADMITTING",
    "MEDIATOR_WS_RETRY_AFTER_S",
    "MEDIATOR_WS_DB_THREADS",
):
    if globals()[_name] < 0:
        raise ImproperlyConfigured(f"{_name} must be 0 or more")

# --- Operator console and API (docs/operators.md) ---------------------------------------
# Host → tenant lookups are cached per process for this many seconds (0 = off). Saves through the
# tenant services clear this process's cache at once; other processes see a change within the TTL.
MEDIATOR_TENANT_CACHE_SECONDS = env_int("MEDIATOR_TENANT_CACHE_SECONDS", 5)
# The operator surfaces (/admin/, /api/v1/, /dashboard/) answer only on these hosts; elsewhere a
# 404 (apps/tenants/middleware.py). Comma-separated `host` (any port) or `host:port`;
# "*" is every host, the development default. Production has no default: unset is a startup failure.
_operator_hosts = (env("MEDIATOR_OPERATOR_HOSTS") or "").strip()
if not _operator_hosts:
    if PRODUCTION:
        raise ImproperlyConfigured(
            "MEDIATOR_OPERATOR_HOSTS must be set in production: the host names that serve /admin/, "
            '/api/v1/ and /dashboard/ (comma-separated host or host:port; "*" for every host)'
        )
    _operator_hosts = "*"
MEDIATOR_OPERATOR_HOSTS = [h.strip().lower().rstrip(".") for h in _operator_hosts.split(",") if h.strip()]
for _host in MEDIATOR_OPERATOR_HOSTS:
    if not re.fullmatch(r"\*|[a-z0-9]([a-z0-9.-]*[a-z0-9])?(:\d{1,5})?|\[[0-9a-f:.]+\](:\d{1,5})?", _host):
        raise ImproperlyConfigured(f"MEDIATOR_OPERATOR_HOSTS: not a host or host:port: {_host!r}")
# Content-Security-Policy of the staff pages (apps/ops/middleware.py); empty = none. Everything from
# this origin, no inline script; the console theme's Alpine.js evaluates its x-* attributes
# ('unsafe-eval') and its templates, Swagger UI and Redoc set inline styles ('unsafe-inline').
MEDIATOR_CSP = env(
    "MEDIATOR_CSP",
    "default-src 'self'; script-src 'self' 'unsafe-eval'; style-src 'self' 'unsafe-inline'; img-src 'self' data:; "
    "font-src 'self' data:; worker-src 'self' blob:; object-src 'none'; base-uri 'self'; form-action 'self'; "
    "frame-ancestors 'none'",
)
MEDIATOR_CSP_PATHS = ["/admin/", "/dashboard/", "/api/v1/docs/", "/api/v1/redoc/"]
# The console theme's login form carries no "next": land operators on the console, not /accounts/profile/.
LOGIN_REDIRECT_URL = "/admin/"
REST_FRAMEWORK = {
    # A token for scripts; the console's session (with its CSRF token) for a logged-in operator,
    # so that Swagger UI's "Try it out" works from the browser.
    "DEFAULT_AUTHENTICATION_CLASSES": [
        "apps.tenants.auth.ApiTokenAuthentication",
        "rest_framework.authentication.SessionAuthentication",
    ],
    # Staff plus the model permission the console needs for the same action.
    "DEFAULT_PERMISSION_CLASSES": ["apps.tenants.permissions.OperatorPermissions"],
    "DEFAULT_RENDERER_CLASSES": ["rest_framework.renderers.JSONRenderer"],
    "DEFAULT_PARSER_CLASSES": ["rest_framework.parsers.JSONParser"],
    "DEFAULT_SCHEMA_CLASS": "drf_spectacular.openapi.AutoSchema",
    # ?limit= 1 to 500 (50 by default), ?offset=: anything else is a 400 (docs/operators.md#operator-api).
    "DEFAULT_PAGINATION_CLASS": "apps.tenants.apibase.OperatorPagination",
    "PAGE_SIZE": 50,
    # Every bad input, a body that is not JSON included, answers the one documented 400 shape.
    "EXCEPTION_HANDLER": "apps.tenants.apibase.operator_exception_handler",
    "DATETIME_FORMAT": UTC_FORMAT,
}
SPECTACULAR_SETTINGS = {
    "TITLE": "Decentrl mediator operator API",
    "DESCRIPTION": (
        "Manage hosted mediators (tenants): policy, status, key rotation, statistics, the audit log and "
        "usage reports.\n\n"
        "**Authentication.** Scripts send `Authorization: Token <key>`; `manage.py operator_token <user>` "
        "issues a staff user's key and prints it once (only its digest is stored). In a browser logged into the console (`/admin/`), *Try it out* uses "
        "that session. Every call also needs the model permission the console needs for the same action "
        "(docs/operators.md#permissions).\n\n"
        "**Errors.** 400 maps each field to its messages and changes nothing; 401 means no credentials; "
        "403 a non-staff user or a missing permission; 404 an unknown tenant or run. Times are ISO 8601 "
        "in UTC with a `Z`."
    ),
    "VERSION": "1.0.0",
    "SERVE_INCLUDE_SCHEMA": False,
    # Request bodies get components of their own (`TenantCreateRequest`), without the read-only
    # members, and with what the request needs (`minLength: 1` for a member that may not be blank).
    "COMPONENT_SPLIT_REQUEST": True,
    # Models that share a choices' name ("status", "state", "kind"): each enum gets a name of its own.
    "ENUM_NAME_OVERRIDES": {
        "TenantStatusEnum": "apps.tenants.models.Tenant.Status",
        "ReportRunStatusEnum": "apps.usage.models.ReportRun.Status",
        "PushProviderKindEnum": "apps.push.models.PushProvider.Kind",
        "PushProviderStateEnum": "apps.push.models.PushProvider.State",
        "MediationStateEnum": "apps.didcomm.models.Mediation.State",
        "ReportRunKindEnum": "apps.usage.models.ReportRun.Kind",
    },
    "SWAGGER_UI_DIST": "SIDECAR",
    "SWAGGER_UI_FAVICON_HREF": "SIDECAR",
    "REDOC_DIST": "SIDECAR",
    "POSTPROCESSING_HOOKS": [
        "drf_spectacular.hooks.postprocess_schema_enums",
        "apps.console.api_schema.finish_operator_schema",
    ],
}
# The console's sidebar, in this order (apps/console/site.py::console_navigation builds it per request).
# A "model" entry shows when that model has an admin page the user may view; an "app" entry lists
# every admin page of that app, so the DIDComm group appears once apps/didcomm registers models;
# a "url" entry is a named URL (staff only, like the whole console), shown only to those holding
# its "needs" (model, verb) when it has one.
CONSOLE_NAVIGATION = [
    (
        "Operate",
        [
            {"title": "Tenants", "icon": "dns", "model": "tenants.Tenant"},
            {
                "title": "Usage dashboard",
                "icon": "monitoring",
                "url": "usage:dashboard",
                "needs": ("usage.ReportRun", "view"),  # apps/usage/permissions.py: the dashboard's verb
            },
            {"title": "Report runs", "icon": "summarize", "model": "usage.ReportRun"},
            {"title": "Audit log", "icon": "history", "model": "tenants.AuditEntry"},
            {"title": "API docs", "icon": "api", "url": "api-docs"},
        ],
    ),
    ("DIDComm", [{"app": "didcomm", "icon": "forum"}]),
    (
        "Monitoring",
        [
            {"title": "Scheduled jobs", "icon": "schedule", "model": "ops.JobStat"},
            {"title": "Command meters", "icon": "speed", "model": "usage.CommandMeter"},
        ],
    ),
    (
        "Access",
        [
            {"title": "Users", "icon": "person", "model": "auth.User"},
            {"title": "Groups", "icon": "group", "model": "auth.Group"},
            {"title": "API tokens", "icon": "key", "model": "tenants.ApiToken"},
        ],
    ),
]


def _static(path: str):
    return lambda request: f"/{STATIC_URL}{path}"


UNFOLD = {
    "SITE_TITLE": "Mediator operator console",
    "SITE_HEADER": "Decentrl mediator",
    "SITE_SYMBOL": "hub",
    # The header's site link leads to the usage dashboard (not to /, a tenant's DID document), for
    # those who may open it; none on the login page, where it would only lead back to the login.
    "SITE_URL": "apps.console.site.console_site_url",
    "SITE_FAVICONS": [{"rel": "icon", "type": "image/svg+xml", "href": _static("console/favicon.svg")}],
    "SHOW_HISTORY": True,
    "SHOW_VIEW_ON_SITE": False,
    "DASHBOARD_CALLBACK": "apps.console.site.console_overview",
    "SIDEBAR": {
        "show_search": False,
        "show_all_applications": False,
        "navigation": "apps.console.site.console_navigation",
    },
    # Static files only (no inline code), so a Content-Security-Policy can allow them by origin.
    "STYLES": [_static("console/console.css")],
    "SCRIPTS": [_static("console/console.js")],
}

# --- Usage metering and reports (docs/usage.md) ------------------------------------------
# "buffered" (rows batched off the request thread), "sync" (one INSERT per command) or "off".
USAGE_METERING_MODE = env("USAGE_METERING_MODE", "buffered")
if USAGE_METERING_MODE not in ("buffered", "sync", "off"):
    raise ImproperlyConfigured("USAGE_METERING_MODE must be buffered, sync or off")
USAGE_METERING_BATCH = env_int("USAGE_METERING_BATCH", 500)
USAGE_METERING_FLUSH_MS = env_int("USAGE_METERING_FLUSH_MS", 250)
USAGE_METERING_MAX_BUFFER = env_int("USAGE_METERING_MAX_BUFFER", 100_000)
# Celery queue of the report launcher (a worker that can start Spark consumes it); hard limit of one run.
USAGE_REPORT_QUEUE = env("USAGE_REPORT_QUEUE", "celery")
USAGE_REPORT_TIMEOUT_S = env_int("USAGE_REPORT_TIMEOUT_S", 3600)
USAGE_REPORT_MAX_DAYS = env_int("USAGE_REPORT_MAX_DAYS", 366)
# The local Spark engine's lazy start by the report launcher (spark_reports/engine.py).
USAGE_ENGINE_START_TIMEOUT_S = env_int("USAGE_ENGINE_START_TIMEOUT_S", 180)
# A worker starts and warms the local Spark engine when it starts (apps/usage/tasks.py): make run
# sets it (scripts/run_embedded_extras.sh), so that its first report does not wait for a cold JVM.
USAGE_ENGINE_PRESTART = env_bool("USAGE_ENGINE_PRESTART", False)
# Nightly catch-up: the nightly run reports every day since the last one reported, at most this many.
USAGE_NIGHTLY_MAX_CATCHUP_DAYS = env_int("USAGE_NIGHTLY_MAX_CATCHUP_DAYS", 7)
# The metering lake (spark_reports/lake.py): a local path or any Hadoop filesystem URI the Spark
# engine can write (hdfs://, s3a://, gs://, abfs://: docs/usage.md says what object storage needs).
USAGE_LAKE_URI = env("USAGE_LAKE_URI", str(VAR_DIR / "lake"))
# Whole UTC days the lake keeps (older day partitions are dropped by prune_metering).
USAGE_LAKE_RETENTION_DAYS = env_int("USAGE_LAKE_RETENTION_DAYS", 400)
# Days an exported metering row stays in the database (the live dashboard reads the last hour).
USAGE_METERING_KEEP_DAYS = env_int("USAGE_METERING_KEEP_DAYS", 2)

LOG_LEVEL = env("LOG_LEVEL", "INFO")
# LOG_FORMAT=json: one JSON object per line (command lines carry tenant, command, code, status,
# duration_ms). SQL debug records are always redacted to "(seconds) VERB table": Django inlines
# parameters into them, and parameters are payloads, tags and signatures (docs/operations.md).
LOG_FORMAT = env("LOG_FORMAT", "plain")
if LOG_FORMAT not in ("plain", "json"):
    raise ImproperlyConfigured("LOG_FORMAT must be plain or json")
LOGGING = {
    "version": 1,
    "disable_existing_loggers": False,
    "filters": {
        "redact_sql": {"()": "apps.ops.logconfig.RedactSqlFilter"},
        "client_fault": {"()": "apps.ops.logconfig.ClientFaultFilter"},
    },
    "formatters": {
        "plain": {"()": "apps.ops.logconfig.PlainFormatter"},
        "json": {"()": "apps.ops.logconfig.JsonFormatter"},
    },
    "handlers": {
        "console": {
            "class": "logging.StreamHandler",
            "formatter": LOG_FORMAT,
            "filters": ["redact_sql", "client_fault"],
        }
    },
    "root": {"handlers": ["console"], "level": LOG_LEVEL},
    "loggers": {
        # Django's default config pins "django" at INFO with its own handler; naming it here drops
        # that handler (no duplicate lines) and lets LOG_LEVEL=DEBUG reach the SQL log when DEBUG.
        "django": {"level": LOG_LEVEL},
        "django.request": {"level": "ERROR"},
        # On the originating loggers too, so that every handler sees only the redacted record.
        "django.db.backends": {"filters": ["redact_sql"]},
        "django.db.backends.schema": {"filters": ["redact_sql"]},
        # The HTTP clients log each request's URL at INFO/DEBUG, and a push URL carries the device
        # token (APNs' path, a Web Push endpoint): never below WARNING (docs/push.md, "Providers").
        "httpx": {"level": "WARNING"},
        "httpcore": {"level": "WARNING"},
        "urllib3": {"level": "WARNING"},
        "hpack": {"level": "WARNING"},
    },
}

os.environ.setdefault("MEDIATOR_SETTINGS_LOADED", "1")
