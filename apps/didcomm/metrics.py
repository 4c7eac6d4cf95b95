"""DIDComm v2 Prometheus metrics with seed 004's names (apps/ops/metrics.py style): aggregate only.

No DID label anywhere: per-recipient queue depths are in the admin and the operator API only;
`mediator_message_queue_size` is per tenant and read from the database at scrape time.
"""

from __future__ import annotations

from prometheus_client import Counter, Gauge

from apps.ops.metrics import OPS_REGISTRY

FORWARDED = Counter(
    "mediator_messages_forwarded_total", "DIDComm routing/2.0 forwards accepted.", registry=OPS_REGISTRY
)
STORED = Counter("mediator_messages_stored_total", "DIDComm messages stored for a recipient.", registry=OPS_REGISTRY)
DELIVERED = Counter(
    "mediator_messages_delivered_total",
    "DIDComm messages acknowledged by messages-received (delivered; removed).",
    registry=OPS_REGISTRY,
)
EVICTED = Counter(
    "mediator_messages_evicted_total",
    "DIDComm messages evicted from a full queue (overflow policy evict, UC-021 AF-4).",
    registry=OPS_REGISTRY,
)
ACTIVE_CONNECTIONS = Gauge(
    "mediator_active_connections",
    "Open DIDComm WebSockets (all processes).",
    registry=OPS_REGISTRY,
    multiprocess_mode="livesum",
)
OUTBOUND_FAILURES = Counter(
    "mediator_didcomm_outbound_failures_total",
    "DIDComm v1 outbound POSTs to an agent's endpoint that failed, by reason: refused (the target "
    "check: not http(s), unresolvable or a non-public address; dropped), http_status (a non-2xx "
    "answer), network (no answer; both retried), expired (given up after its retries).",
    ["reason"],
    registry=OPS_REGISTRY,
)
