"""Spark session and database location, configured from the environment only.

SPARK_MASTER            default local[*]; a cluster URL runs the same job code there
SPARK_LOCAL_IP          default 127.0.0.1 (set before the JVM starts)
SPARK_DRIVER_MEMORY     default 1g
SPARK_JDBC_JARS         comma-separated driver jars, default Debian's PostgreSQL and SQLite jars
SPARK_JDBC_PARTITIONS   partitions of each partitioned JDBC read, default 4
SPARK_SHUFFLE_PARTITIONS default 8 (reports are small; 200 would only add task overhead)
REPORT_DATABASE_URL     the database as a URL (postgresql://user:pw@host:port/db or sqlite:////path);
                        falls back to DATABASE_URL, then to the embedded default var/mediator.sqlite3
"""

from __future__ import annotations

import logging
import os
from dataclasses import dataclass, field
from pathlib import Path
from urllib.parse import unquote, urlsplit

ROOT = Path(__file__).resolve().parent.parent
DEFAULT_JARS = "/usr/share/java/postgresql.jar,/usr/share/java/sqlite-jdbc.jar"


@dataclass(frozen=True)
class Database:
    """Where the job reads and writes, as JDBC sees it."""

    dialect: str  # "postgresql" | "sqlite"
    url: str
    properties: dict[str, str] = field(default_factory=dict)

    @property
    def is_sqlite(self) -> bool:
        return self.dialect == "sqlite"


def database_from_url(url: str) -> Database:
    """A Django-style database URL as JDBC (the password stays in properties, never in argv)."""
    parts = urlsplit(url)
    scheme = parts.scheme.split("+")[0]
    if scheme in ("postgres", "postgresql", "pgsql"):
        host = parts.hostname or "127.0.0.1"
        port = parts.port or 5432
        name = unquote(parts.path.lstrip("/"))
        props = {"driver": "org.postgresql.Driver", "user": unquote(parts.username or "postgres")}
        if parts.password:
            props["password"] = unquote(parts.password)
        return Database("postgresql", f"jdbc:postgresql://{host}:{port}/{name}", props)
    if scheme == "sqlite":
        path = unquote(parts.path)
        if url.startswith("sqlite:////"):
            path = "/" + path.lstrip("/")
        # busy_timeout: the mediator may be writing (WAL lets us read meanwhile).
        return Database("sqlite", f"jdbc:sqlite:{path}", {"driver": "org.sqlite.JDBC", "busy_timeout": "20000"})
    raise ValueError(f"unsupported database URL scheme {scheme!r}")


def database_from_env() -> Database:
    url = os.environ.get("REPORT_DATABASE_URL") or os.environ.get("DATABASE_URL")
    if not url:
        url = f"sqlite:///{ROOT / 'var' / 'mediator.sqlite3'}"
    return database_from_url(url)


def env_int(name: str, default: int) -> int:
    value = os.environ.get(name, "")
    return int(value) if value.strip() else default


def build_session(app_name: str = "mediator-usage-report"):
    """The SparkSession for a job: master from SPARK_MASTER, UI off, UTC, quiet logs, JDBC jars."""
    os.environ.setdefault("SPARK_LOCAL_IP", "127.0.0.1")
    from pyspark.sql import SparkSession

    logging.getLogger("py4j").setLevel(logging.WARNING)

    log4j = ROOT / "spark_reports" / "log4j2.properties"
    java_opts = f"-Dlog4j2.configurationFile=file:{log4j} -Dlog4j.configurationFile=file:{log4j}"
    master = os.environ.get("SPARK_MASTER", "local[*]")
    builder = SparkSession.builder.appName(app_name).master(master)
    if master.startswith("local"):
        # Local mode: never listen beyond loopback. A cluster driver must be reachable, so it is left alone.
        builder = builder.config("spark.driver.bindAddress", os.environ["SPARK_LOCAL_IP"]).config(
            "spark.driver.host", os.environ["SPARK_LOCAL_IP"]
        )
    spark = (
        builder.config("spark.ui.enabled", "false")
        .config("spark.ui.showConsoleProgress", "false")
        .config("spark.driver.memory", os.environ.get("SPARK_DRIVER_MEMORY", "1g"))
        .config("spark.driver.extraJavaOptions", java_opts)
        .config("spark.executor.extraJavaOptions", java_opts)
        .config("spark.jars", os.environ.get("SPARK_JDBC_JARS", DEFAULT_JARS))
        .config("spark.sql.session.timeZone", "UTC")
        .config("spark.sql.shuffle.partitions", str(env_int("SPARK_SHUFFLE_PARTITIONS", 8)))
        .config("spark.sql.adaptive.enabled", "true")
        .getOrCreate()
    )
    spark.sparkContext.setLogLevel(os.environ.get("SPARK_LOG_LEVEL", "ERROR"))
    return spark
