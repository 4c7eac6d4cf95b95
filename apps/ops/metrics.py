"""Prometheus metrics: aggregate only, never a DID, a payload or a key as a label.

Process-local metrics live in OPS_REGISTRY. With PROMETHEUS_MULTIPROC_DIR set (several Daphne
processes) prometheus-client writes them to that shared directory and `/metrics` adds up every
process's files, so counters are deployment totals whichever process is scraped.

Figures that already live in the database (queue depth, nonce store size, job runs) are read at
scrape time by DatabaseCollector and cached briefly, so they are correct across hosts too.
"""

from __future__ import annotations

import logging
import os
import threading
import time
from collections.abc import Callable

from django.db import DatabaseError
from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram, generate_latest, multiprocess
from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily
from prometheus_client.multiprocess import MultiProcessCollector

from apps.messaging.selectors import pending_backlog

from .models import JobStat

log = logging.getLogger("mediator.metrics")

OPS_REGISTRY = CollectorRegistry(auto_describe=True)


def _counter(name: str, doc: str, labels: tuple[str, ...] = ()) -> Counter:
    """A counter of this process in OPS_REGISTRY (summed over processes by `exposition`)."""
    return Counter(name, doc, labels, registry=OPS_REGISTRY)


COMMANDS = _counter(
    "mediator_commands_total",
    "Commands handled, by transport, command type and result code.",
    ("transport", "command", "code"),
)
COMMAND_SECONDS = Histogram(
    "mediator_command_duration_seconds",
    "Time to handle one command (parse to reply), by transport and command type.",
    ["transport", "command"],
    buckets=(0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0),
    registry=OPS_REGISTRY,
)
PENDING_STORED = _counter("mediator_pending_events_stored_total", "TWO_WAY_PRIVATE events stored for a recipient.")
PENDING_DELIVERED = _counter(
    "mediator_pending_events_delivered_total",
    "Pending events acknowledged by their recipient (delivered; payload dropped).",
)
PUSHES_DROPPED = _counter(
    "mediator_pushes_dropped_total",
    "Real-time pushes dropped because a process's push queue was full (the events stay stored).",
)
# Wake-up pushes (docs/push.md): by provider kind and a bounded reason code, never a device.
PUSH_SENT = _counter("mediator_push_sent_total", "Wake-up pushes a provider accepted, by provider.", ("provider",))
PUSH_FAILED = _counter(
    "mediator_push_failed_total",
    "Wake-up push attempts that failed, by provider and reason (retry: retried later; others kept the device).",
    ("provider", "outcome", "reason"),
)
PUSH_COALESCED = _counter(
    "mediator_push_coalesced_total",
    "Messages stored for a sleeping subject already woken since its last pickup (no push sent).",
)
PUSH_PRUNED = _counter(
    "mediator_push_tokens_pruned_total",
    "Device tokens deleted because their provider said they are dead.",
    ("provider",),
)
WS_CONNECTIONS = Gauge(
    "mediator_websocket_connections",
    "Open /ws sockets (all processes).",
    registry=OPS_REGISTRY,
    multiprocess_mode="livesum",
)
WS_EVENTS = _counter(
    "mediator_websocket_events_total",
    "WebSocket lifecycle events (connect, authenticated, disconnect, send_budget_exceeded, over_capacity).",
    ("event",),
)
MESSAGES = _counter(
    "mediator_didcomm_messages_total",
    "DIDComm messages handled, by transport, short message type and result code.",
    ("transport", "type", "code"),
)
RATE_LIMITED = _counter("mediator_rate_limited_total", "Requests refused by a rate limit, by limit scope.", ("scope",))
RATE_LIMIT_ERRORS = _counter(
    "mediator_rate_limiter_errors_total", "Rate-limit checks that failed open (Redis unreachable)."
)

WS_EVENT_NAMES = {"connect", "authenticated", "disconnect", "send_budget_exceeded", "over_capacity"}


class LabelledChildren:
    """A labelled metric's children kept per label tuple: `labels()` validates and locks on every
    call, a measurable share of a command's worker CPU. For label values from closed sets (transports,
    protocol message types or "-", result codes), so this stays small; it is emptied anyway past
    `limit` entries."""

    def __init__(self, build: Callable[[tuple], object], limit: int = 4096) -> None:
        self.build = build
        self.limit = limit
        self.kept: dict[tuple, object] = {}

    def get(self, key: tuple):
        child = self.kept.get(key)
        if child is None:
            if len(self.kept) >= self.limit:
                self.kept.clear()
            child = self.kept[key] = self.build(key)
        return child


# (transport, command, code) → that series' counter and histogram children.
_command_children = LabelledChildren(lambda key: (COMMANDS.labels(*key), COMMAND_SECONDS.labels(*key[:2])))


# (transport, short type, code) → that series' DIDComm message counter child.
_message_children = LabelledChildren(lambda key: MESSAGES.labels(*key))


def observe(record) -> None:
    """Request-record observer (apps/usage/records.py) for every protocol: a Decentrl command is
    counted and timed in the command series, a DIDComm message counted in the message series."""
    key = (record.transport, record.command_type or "-", record.code)
    if record.protocol != "decentrl":
        _message_children.get(key).inc()
        return
    counter, seconds = _command_children.get(key)
    counter.inc()
    seconds.observe(record.duration_ms / 1000)
    if record.channel == "TWO_WAY_PRIVATE" and record.code == "SUCCESS":
        PENDING_STORED.inc()


def observe_ws(event: str, tenant_slug: str | None) -> None:
    """A /ws socket's lifecycle `event` (connect, authenticated, disconnect): the open-socket gauge and counters."""
    if event not in WS_EVENT_NAMES:
        return
    WS_EVENTS.labels(event).inc()
    if event == "connect":
        WS_CONNECTIONS.inc()
    elif event == "disconnect":
        WS_CONNECTIONS.dec()


def observe_acknowledged(sender=None, *, count: int = 0, **kwargs) -> None:
    """Receiver of messaging's pending_events_acknowledged signal."""
    if count > 0:
        PENDING_DELIVERED.inc(count)


def observe_pushes_dropped(sender=None, *, count: int = 0, **kwargs) -> None:
    """Receiver of messaging's pushes_dropped signal."""
    if count > 0:
        PUSHES_DROPPED.inc(count)


# Row counts of stores owned by apps above ops, read at scrape time: (metric name, help, count()).
# The front doors register theirs in AppConfig.ready() (the Decentrl nonce store).
STORE_SIZES: list[tuple[str, str, Callable[[], int]]] = []


def register_store_size(name: str, doc: str, count: Callable[[], int]) -> None:
    if all(entry[0] != name for entry in STORE_SIZES):
        STORE_SIZES.append((name, doc, count))


# Per-tenant figures of stores above ops, read at scrape time: (metric name, help, rows()) where
# rows() gives (tenant slug, value) pairs. Never a DID label (cardinality and privacy).
TENANT_SIZES: list[tuple[str, str, Callable[[], list[tuple[str, int]]]]] = []


def register_tenant_size(name: str, doc: str, rows: Callable[[], list[tuple[str, int]]]) -> None:
    if all(entry[0] != name for entry in TENANT_SIZES):
        TENANT_SIZES.append((name, doc, rows))


class DatabaseCollector:
    """Scrape-time figures read from PostgreSQL, cached for CACHE_S per process."""

    CACHE_S = 10.0

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._at = 0.0
        self._families: list = []

    def collect(self):
        with self._lock:
            if time.monotonic() - self._at > self.CACHE_S:
                self._families = self._read()
                self._at = time.monotonic()
            return list(self._families)

    def invalidate(self) -> None:
        with self._lock:
            self._at = 0.0

    def _read(self) -> list:
        up = GaugeMetricFamily("mediator_metrics_database_up", "1 if the scrape could read the database.")
        try:
            recipients, events, deepest = pending_backlog()
            sizes = [(name, doc, count()) for name, doc, count in STORE_SIZES]
            tenant_sizes = [(name, doc, rows()) for name, doc, rows in TENANT_SIZES]
            stats = list(
                JobStat.objects.order_by("name").values_list("name", "runs", "failures", "items", "last_success_at")
            )
        except DatabaseError:
            log.warning("metrics: database unreachable during scrape")
            up.add_metric([], 0)
            return [up]
        up.add_metric([], 1)
        queued = GaugeMetricFamily("mediator_pending_queue_events", "Unacknowledged pending events, all recipients.")
        queued.add_metric([], events)
        queues = GaugeMetricFamily("mediator_pending_queue_recipients", "Recipients with at least one pending event.")
        queues.add_metric([], recipients)
        deepest_f = GaugeMetricFamily("mediator_pending_queue_max_depth", "Deepest single recipient queue.")
        deepest_f.add_metric([], deepest)
        size_fs = []
        for name, doc, size in sizes:
            size_fs.append(GaugeMetricFamily(name, doc))
            size_fs[-1].add_metric([], size)
        for name, doc, rows in tenant_sizes:
            size_fs.append(GaugeMetricFamily(name, doc, labels=["tenant"]))
            for slug, value in rows:
                size_fs[-1].add_metric([slug], value)
        runs = CounterMetricFamily("mediator_job_runs", "Maintenance and Celery job runs.", labels=["job"])
        fails = CounterMetricFamily("mediator_job_failures", "Maintenance and Celery job failures.", labels=["job"])
        items = CounterMetricFamily("mediator_job_items", "Rows a maintenance job removed.", labels=["job"])
        last_ok = GaugeMetricFamily(
            "mediator_job_last_success_timestamp_seconds", "When each job last succeeded.", labels=["job"]
        )
        expired = CounterMetricFamily("mediator_pending_events_expired", "Pending events removed past their TTL.")
        expired_total = 0
        for name, n_runs, n_fails, n_items, last in stats:
            runs.add_metric([name], n_runs)
            fails.add_metric([name], n_fails)
            items.add_metric([name], n_items)
            if last is not None:
                last_ok.add_metric([name], last.timestamp())
            if name == "purge_pending_events":
                expired_total = n_items
        expired.add_metric([], expired_total)
        return [up, queued, queues, deepest_f, *size_fs, runs, fails, items, last_ok, expired]


DATABASE_COLLECTOR = DatabaseCollector()


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


def forget_dead_processes(path: str) -> list[int]:
    """Drop the live-gauge files of processes that no longer exist (a Daphne killed with -9 never
    decrements its open-socket gauge). Counters of dead processes are kept: they still count.
    The directory is per host, so every pid in it is a pid of this host."""
    dead = []
    for name in os.listdir(path):
        if not (name.startswith("gauge_live") and name.endswith(".db")):
            continue
        try:
            pid = int(name[: -len(".db")].rsplit("_", 1)[1])
        except (IndexError, ValueError):
            continue
        if pid not in dead and not _alive(pid):
            multiprocess.mark_process_dead(pid, path)
            dead.append(pid)
    return dead


def exposition() -> bytes:
    """The text exposition of every metric: all processes' counters plus the database figures."""
    registry = CollectorRegistry()
    path = os.environ.get("PROMETHEUS_MULTIPROC_DIR")
    if path:
        forget_dead_processes(path)
        MultiProcessCollector(registry)
        local = b""
    else:
        local = generate_latest(OPS_REGISTRY)
    registry.register(DATABASE_COLLECTOR)
    return local + generate_latest(registry)
