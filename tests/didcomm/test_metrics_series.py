"""mediator_didcomm_messages_total counts each message in its own series, also once the kept
label children have been emptied past their cap (apps/ops/metrics.LabelledChildren)."""

from datetime import UTC, datetime

from apps.ops import metrics
from apps.ops.metrics import OPS_REGISTRY
from apps.usage.records import DIDCOMM_V2, Record


def _record(transport: str, short: str | None, code: str) -> Record:
    return Record(
        protocol=DIDCOMM_V2, tenant_id=1, tenant_slug="t", at=datetime.now(UTC), transport=transport, channel="DIDCOMM",
        command_type=short, code=code, http_status=202, bytes_in=1, bytes_out=0, duration_ms=1.0,
        sender_did=None, remote_addr=None,
    )  # fmt: skip


def _count(transport: str, short: str, code: str) -> float:
    labels = {"transport": transport, "type": short, "code": code}
    return OPS_REGISTRY.get_sample_value("mediator_didcomm_messages_total", labels) or 0.0


def test_each_message_counts_in_its_own_series_also_past_the_children_cap(monkeypatch):
    series = [
        ("http", "routing/2.0/forward", "SUCCESS"),
        ("ws", "routing/2.0/forward", "EVICTED"),
        ("http", "-", "e.p.msg"),
    ]
    before = [_count(*s) for s in series]
    monkeypatch.setattr(metrics._message_children, "limit", 2)
    for transport, short, code in (
        ("http", "routing/2.0/forward", "SUCCESS"),
        ("ws", "routing/2.0/forward", "EVICTED"),
        ("http", None, "e.p.msg"),  # a third series: the kept children are emptied, nothing is lost
        ("http", "routing/2.0/forward", "SUCCESS"),
    ):
        metrics.observe(_record(transport, short, code))
    assert [_count(*s) - b for s, b in zip(series, before, strict=True)] == [2.0, 1.0, 1.0]
    assert len(metrics._message_children.kept) <= 2
