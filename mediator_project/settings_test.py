"""Test override: only what tests need. Tests run on real PostgreSQL (TEST_DATABASE_URL)."""

import os

import dj_database_url

from .settings import *  # noqa: F403
from .settings import DATABASES

DATABASES["default"] = dj_database_url.parse(
    os.environ.get("TEST_DATABASE_URL", "postgresql://postgres@127.0.0.1:5432/mediator"), conn_max_age=0
)
DATABASES["default"]["ATOMIC_REQUESTS"] = False
# The production layout's HTTP tier (scripts/run_production.sh sets DB_CONN_MAX_AGE) keeps its
# persistent connections under test too; the test process itself has none.
DATABASES["default"]["CONN_MAX_AGE"] = int(os.environ.get("DB_CONN_MAX_AGE", "0"))
# Several suites may run on one PostgreSQL at once (developers, CI): MEDIATOR_TEST_DB_NAME
# gives a run its own test database. Servers a test starts connect to that database by URL.
if os.environ.get("MEDIATOR_TEST_DB_NAME"):
    DATABASES["default"]["TEST"] = {"NAME": os.environ["MEDIATOR_TEST_DB_NAME"]}
PASSWORD_HASHERS = ["django.contrib.auth.hashers.MD5PasswordHasher"]
# The test process meters in the request's own connection (sync), so a test's rows are rolled back
# with it: the buffered writer thread commits on a connection of its own, outside the test, and a
# later module would find them. Servers a test starts meter as production does (servers.server_env).
if "USAGE_METERING_MODE" not in os.environ:
    USAGE_METERING_MODE = "sync"
# In-process sockets (WebsocketCommunicator) run their database calls on the test's own thread, so
# they see its transaction; servers a test starts use the sockets' threads as production does
# (servers.server_env, apps/realtime/admission.py).
if "MEDIATOR_WS_DB_THREADS" not in os.environ:
    MEDIATOR_WS_DB_THREADS = 0
MEDIATOR_DEFAULT_TENANT = "default"
# Tests change tenants with queryset updates and across processes: resolve the host every time.
MEDIATOR_TENANT_CACHE_SECONDS = 0
# The suite sends many commands from 127.0.0.1: limits are off unless a test enables them
# (override_settings, tenant fields, or the variable in a test server's environment).
MEDIATOR_RATE_LIMIT_PER_DID = int(os.environ.get("MEDIATOR_RATE_LIMIT_PER_DID", "0"))
MEDIATOR_RATE_LIMIT_PER_IP = int(os.environ.get("MEDIATOR_RATE_LIMIT_PER_IP", "0"))
MEDIATOR_WS_CONNECT_PER_IP = int(os.environ.get("MEDIATOR_WS_CONNECT_PER_IP", "0"))
MEDIATOR_WS_AUTH_PER_IP = int(os.environ.get("MEDIATOR_WS_AUTH_PER_IP", "0"))
MEDIATOR_DIDCOMM_RATE_LIMIT_PER_SENDER = int(os.environ.get("MEDIATOR_DIDCOMM_RATE_LIMIT_PER_SENDER", "0"))
MEDIATOR_DIDCOMM_RATE_LIMIT_PER_IP = int(os.environ.get("MEDIATOR_DIDCOMM_RATE_LIMIT_PER_IP", "0"))
# The suite's DIDComm v1 agents (a local HTTP server, ACA-Py) listen on 127.0.0.1.
MEDIATOR_DIDCOMM_OUTBOUND_ALLOW_PRIVATE = os.environ.get("MEDIATOR_DIDCOMM_OUTBOUND_ALLOW_PRIVATE", "1") == "1"
# Tests of the guard switch private targets off and expect production's answer for loopback too.
MEDIATOR_DIDCOMM_OUTBOUND_ALLOW_LOOPBACK = os.environ.get("MEDIATOR_DIDCOMM_OUTBOUND_ALLOW_LOOPBACK", "0") == "1"
# Parallel runs share Redis: each test database gets its own channel-layer keys, in this process and
# in every server a test starts (they load these settings with the same MEDIATOR_TEST_DB_NAME).
MEDIATOR_CHANNEL_LAYER_PREFIX = f"{MEDIATOR_CHANNEL_LAYER_PREFIX}.{os.environ.get('MEDIATOR_TEST_DB_NAME') or 'test'}"  # noqa: F405
if CHANNEL_LAYERS["default"]["BACKEND"] == "channels_redis.core.RedisChannelLayer":  # noqa: F405
    CHANNEL_LAYERS["default"]["CONFIG"]["prefix"] = MEDIATOR_CHANNEL_LAYER_PREFIX  # noqa: F405
