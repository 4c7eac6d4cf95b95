"""Spark session and database location, configured from the environment only.

Where a job runs, first match wins:
SPARK_REMOTE            sc://host:port of a Spark Connect server (a cluster's): the job is its client
SPARK_MASTER            a classic master (local[*], spark://..., yarn): the job starts its own driver
(neither)               the warm local engine of THIS deployment, sc://SPARK_ENGINE_HOST:port
                        (spark_reports/engine.py starts it): the port is SPARK_ENGINE_PORT when set,
                        else the one the engine recorded in MEDIATOR_VAR_DIR/spark-engine.json (a
                        free port chosen when it started). The job checks that the engine is this
                        deployment's (its spark.mediator.deployment) before using it.

SPARK_LOCAL_IP          default 127.0.0.1 (set before a classic driver's JVM starts)
SPARK_DRIVER_MEMORY     default 1g (classic driver, or the engine's)
SPARK_JDBC_JARS         comma-separated driver jars, default Debian's PostgreSQL jar
SPARK_JDBC_PARTITIONS   the most tasks of the export's JDBC read (and of compaction), default this
                        machine's cores (the local engine's executors); a cluster's cores when remote
SPARK_SHUFFLE_PARTITIONS default 4 (reports are small; 200 would only add task overhead)
REPORT_WORK_MEM         PostgreSQL work_mem of the job's JDBC reads, default 256MB (a planner allowance: the
                        memory used follows the real groups); they also set enable_sort=off, jit=off
                        (see database_from_url)
REPORT_DATABASE_URL     the PostgreSQL database as a URL (postgresql://user:pw@host:port/db; the launcher,
                        apps/usage/services.report_database_url, gives the embedded server's loopback TCP
                        address); falls back to DATABASE_URL.
                        Several hosts (postgresql://user@h1,h2,h3/db?target_session_attrs=read-write,
                        libpq's multi-host form) are tried in turn; the result rows and the small
                        bounds query go where target_session_attrs says (the primary)
REPORT_READ_FROM        primary (default) or standby: where the JDBC scans of a multi-host URL read;
                        standby prefers a replica (pgjdbc targetServerType=preferSecondary, the primary
                        when none answers), keeping the scans off the primary; a replica may lag
"""

from __future__ import annotations

import hashlib
import json
import logging
import os
from dataclasses import dataclass, field
from pathlib import Path
from typing import TypedDict
from urllib.parse import parse_qs, unquote, urlsplit

ROOT = Path(__file__).resolve().parent.parent
DEFAULT_JARS = "/usr/share/java/postgresql.jar"


class ConnectParams(TypedDict, total=False):
    """psycopg.connect's keyword arguments for the job's own connection (its result rows)."""

    host: str
    port: int
    dbname: str
    user: str
    password: str
    target_session_attrs: str
    connect_timeout: str


@dataclass(frozen=True)
class Database:
    """Where the job reads (JDBC, on the engine) and writes its result rows (Python, in the job)."""

    url: str  # JDBC URL
    properties: dict[str, str] = field(default_factory=dict)  # JDBC properties (user, password, driver)
    connect_kwargs: ConnectParams = field(default_factory=ConnectParams)  # psycopg.connect(**...)


def database_from_url(url: str) -> Database:
    """A PostgreSQL database URL as JDBC (the password stays in properties, never in argv)."""
    parts = urlsplit(url)
    scheme = parts.scheme.split("+")[0]
    if scheme not in ("postgres", "postgresql", "pgsql"):
        raise ValueError(f"unsupported database URL scheme {scheme!r}: the mediator's database is PostgreSQL")
    # libpq's multi-host form (h1,h2,h3): urlsplit keeps the list as the host name.
    host = parts.hostname or "127.0.0.1"
    port = parts.port or 5432
    name = unquote(parts.path.lstrip("/"))
    query = {k: v[-1] for k, v in parse_qs(parts.query).items()}
    props = {"driver": "org.postgresql.Driver", "user": unquote(parts.username or "postgres")}
    # The job's JDBC sessions: no JIT (its compiling took longer than these queries themselves), and
    # for a GROUP BY over a range (a partial aggregate; the export's range reads have none today)
    # hashing rather than sorting on disk: PostgreSQL cannot estimate such groups (it expects one
    # per row), so more work_mem and no sort (none of the job's queries needs one).
    props["options"] = (
        f"-c work_mem={os.environ.get('REPORT_WORK_MEM', '256MB')} -c enable_sort=off"
        " -c enable_incremental_sort=off -c jit=off"
    )
    if parts.password:
        props["password"] = unquote(parts.password)
    connect = ConnectParams(host=host, port=port, dbname=name, user=props["user"])
    if parts.password:
        connect["password"] = props["password"]
    if "target_session_attrs" in query:
        connect["target_session_attrs"] = query["target_session_attrs"]
    if "connect_timeout" in query:
        connect["connect_timeout"] = query["connect_timeout"]
    if os.environ.get("REPORT_READ_FROM", "primary") == "standby":
        props["targetServerType"] = "preferSecondary"
    elif query.get("target_session_attrs") in ("read-write", "primary"):
        props["targetServerType"] = "primary"
    hosts = ",".join(f"{h}:{port}" for h in host.split(","))
    return Database(f"jdbc:postgresql://{hosts}/{name}", props, connect)


def database_from_env() -> Database:
    url = os.environ.get("REPORT_DATABASE_URL") or os.environ.get("DATABASE_URL")
    if not url:
        raise ValueError("REPORT_DATABASE_URL (or DATABASE_URL) must name the PostgreSQL database")
    return database_from_url(url)


def env_int(name: str, default: int) -> int:
    value = os.environ.get(name, "")
    return int(value) if value.strip() else default


# The Spark conf naming the deployment a local engine belongs to (engine.py sets it on the server).
DEPLOYMENT_CONF = "spark.mediator.deployment"


def var_dir() -> Path:
    """The deployment's var/ (MEDIATOR_VAR_DIR, as the Django settings read it)."""
    return Path(os.environ.get("MEDIATOR_VAR_DIR") or ROOT / "var").resolve()


def deployment_id() -> str:
    """This deployment's name for its engine: two checkouts (two var/ folders) never share one."""
    return hashlib.sha256(str(var_dir()).encode()).hexdigest()[:16]


def engine_record_path() -> Path:
    return var_dir() / "spark-engine.json"


def engine_record() -> dict:
    """What the running engine recorded (port, pid, deployment), or {}."""
    try:
        return json.loads(engine_record_path().read_text())
    except (OSError, ValueError):
        return {}


def engine_address() -> tuple[str, int]:
    """Where this deployment's warm local engine listens: SPARK_ENGINE_PORT when set, else the port
    it recorded when it started (0 when none is recorded: nothing answers there)."""
    host = os.environ.get("SPARK_ENGINE_HOST", "127.0.0.1")
    if os.environ.get("SPARK_ENGINE_PORT", "").strip():
        return host, env_int("SPARK_ENGINE_PORT", 0)
    return host, int(engine_record().get("port") or 0)


class ForeignEngine(RuntimeError):
    """The engine answering on this deployment's address belongs to another deployment."""


def session_target() -> tuple[str, str]:
    """("remote", sc://...) or ("master", master URL): where build_session connects."""
    if os.environ.get("SPARK_REMOTE", "").strip():
        return "remote", os.environ["SPARK_REMOTE"].strip()
    if os.environ.get("SPARK_MASTER", "").strip():
        return "master", os.environ["SPARK_MASTER"].strip()
    host, port = engine_address()
    return "remote", f"sc://{host}:{port}"


SESSION_CONFIG = {
    "spark.sql.session.timeZone": "UTC",
    # Adaptive execution re-plans after every stage and runs a report's ~20 small stages one after
    # another, which makes a small report several times slower. The job sizes its shuffles to the
    # row count itself (usage_report.shuffle_partitions).
    "spark.sql.adaptive.enabled": "false",
}


def build_session(app_name: str = "mediator-usage-report"):
    """The SparkSession for a job: a Spark Connect client of the engine (or of SPARK_REMOTE), or a
    classic driver on SPARK_MASTER; UTC, quiet logs, JDBC jars, small shuffles either way."""
    kind, target = session_target()
    logging.getLogger("py4j").setLevel(logging.WARNING)
    shuffle = str(env_int("SPARK_SHUFFLE_PARTITIONS", 4))
    if kind == "remote":
        from pyspark.sql import SparkSession

        # The JDBC drivers and the JVM's settings are the server's (engine.py); only SQL settings travel.
        # One config round trip at creation (the builder sends its map at once), not one per setting.
        settings: dict[str, bool | float | int | str | None] = {
            **SESSION_CONFIG,
            "spark.sql.shuffle.partitions": shuffle,
        }
        session = SparkSession.builder.remote(target).appName(app_name).config(map=settings).create()
        if not os.environ.get("SPARK_REMOTE", "").strip():
            # The local engine: never another deployment's (a second checkout, a stale record).
            found = session.conf.get(DEPLOYMENT_CONF, "")
            if found != deployment_id():
                session.stop()
                raise ForeignEngine(f"the Spark engine at {target} is not this deployment's ({found or 'unnamed'})")
        return session
    return _classic_session(app_name, target, shuffle)


def _classic_session(app_name: str, master: str, shuffle: str):
    os.environ.setdefault("SPARK_LOCAL_IP", "127.0.0.1")
    from pyspark.sql import SparkSession

    log4j = ROOT / "spark_reports" / "log4j2.properties"
    java_opts = f"-Dlog4j2.configurationFile=file:{log4j} -Dlog4j.configurationFile=file:{log4j}"
    builder = SparkSession.builder.appName(app_name).master(master)
    if master.startswith("local"):
        # Local mode: never listen beyond loopback. A cluster driver must be reachable, so it is left alone.
        builder = builder.config("spark.driver.bindAddress", os.environ["SPARK_LOCAL_IP"]).config(
            "spark.driver.host", os.environ["SPARK_LOCAL_IP"]
        )
    builder = (
        builder.config("spark.ui.enabled", "false")
        .config("spark.ui.showConsoleProgress", "false")
        .config("spark.driver.memory", os.environ.get("SPARK_DRIVER_MEMORY", "1g"))
        .config("spark.driver.extraJavaOptions", java_opts)
        .config("spark.executor.extraJavaOptions", java_opts)
        .config("spark.jars", os.environ.get("SPARK_JDBC_JARS", DEFAULT_JARS))
        .config("spark.sql.shuffle.partitions", shuffle)
    )
    for key, value in SESSION_CONFIG.items():
        builder = builder.config(key, value)
    spark = builder.getOrCreate()
    spark.sparkContext.setLogLevel(os.environ.get("SPARK_LOG_LEVEL", "ERROR"))
    return spark
