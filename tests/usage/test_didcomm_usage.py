"""DIDComm v2 traffic in the usage figures (issue 15 §5): messages metered by the DIDComm front door
(channel `didcomm-v2`, the short message type as command type, the problem code as code) show in
the dashboard's live figures and, by message type beside the Decentrl commands, in a real report
run (the Spark job over PostgreSQL). An eviction (code EVICTED) is the overflow policy working: a
success, never an error, and its own row of the codes table."""

from __future__ import annotations

import pytest
from django.utils import timezone

from apps.didcomm.models import DidcommPolicy
from apps.usage import metering
from apps.usage.models import CommandMeter, ReportCommandType, ReportDaily, ReportErrorCode
from apps.usage.records import DIDCOMM_V2 as CHANNEL
from tests.conftest import HOST_A
from tests.support.didcomm_agent import CM2, PICKUP, Agent, forward_for, routed_did
from tests.support.didcomm_client import DidcommPoster

from .test_job_postgres import run_report

pytestmark = [pytest.mark.spark, pytest.mark.django_db(transaction=True)]


def test_didcomm_messages_show_in_the_live_figures_and_in_a_report_by_message_type(
    spark, client, staff_user, tenant_a, tenant_b, post_a, alice
):
    didcomm = DidcommPoster(HOST_A)
    wallet = Agent()
    mediator = didcomm.mediator_did
    didcomm.send(wallet, wallet.message(CM2 + "mediate-request"))
    rcpt = routed_did(mediator)
    didcomm.send(
        wallet, wallet.message(CM2 + "keylist-update", {"updates": [{"recipient_did": rcpt.did, "action": "add"}]})
    )
    DidcommPolicy.objects.filter(tenant=tenant_a).update(queue_cap=2)  # the third forward evicts the first
    for _ in range(3):
        assert didcomm.post(forward_for(rcpt, mediator)).status_code == 202
    assert didcomm.post(forward_for(Agent(), mediator)).status_code == 400  # not a recipient we mediate
    didcomm.send(wallet, wallet.message(PICKUP + "delivery-request", {"limit": 10}))
    # One Decentrl command beside them (alice is not registered: it is refused, and metered).
    status, reply = post_a.command(alice, {"type": "QUERY_EVENTS"}, recipient_did=tenant_a.did)
    assert status >= 400 and reply["type"] == "ERROR"
    metering.flush()

    rows = CommandMeter.objects.filter(tenant=tenant_a, channel=CHANNEL).order_by("id")
    assert [(r.command_type, r.code, r.transport) for r in rows] == [
        ("coordinate-mediation/2.0/mediate-request", "SUCCESS", "http"),
        ("coordinate-mediation/2.0/keylist-update", "SUCCESS", "http"),
        ("routing/2.0/forward", "SUCCESS", "http"),
        ("routing/2.0/forward", "SUCCESS", "http"),
        ("routing/2.0/forward", "EVICTED", "http"),
        ("routing/2.0/forward", "e.p.me.res.not-found", "http"),
        ("messagepickup/3.0/delivery-request", "SUCCESS", "http"),
    ]
    assert {r.sender_did for r in rows[:2]} == {wallet.did} and rows[2].sender_did is None  # anoncrypt forwards
    assert CommandMeter.objects.filter(tenant=tenant_a).exclude(channel=CHANNEL).values_list(
        "command_type", "code"
    ).get() == ("QUERY_EVENTS", reply["code"])

    # The dashboard's live figures count them with the tenant's other traffic; the eviction is no error.
    client.force_login(staff_user)
    live = client.get(f"/dashboard/?tenant={tenant_a.slug}&days=7").context["live"]
    assert [(c.tenant.slug, c.commands_last_hour, c.errors_last_hour) for c in live] == [("tenant-a", 8, 2)]

    # A report run: the message types are rows of the by-type table, and the day's totals include them.
    today = timezone.now().date()
    run = run_report(spark, [tenant_a, tenant_b], today, today)
    by_type = {
        (r.command_type, r.commands, r.errors)
        for r in ReportCommandType.objects.filter(run=run, tenant=tenant_a, day=today)
    }
    assert {
        ("coordinate-mediation/2.0/mediate-request", 1, 0),
        ("coordinate-mediation/2.0/keylist-update", 1, 0),
        ("routing/2.0/forward", 4, 1),
        ("messagepickup/3.0/delivery-request", 1, 0),
    } <= by_type
    assert len(by_type) == 5  # and the one Decentrl command type
    daily = ReportDaily.objects.get(run=run, tenant=tenant_a, day=today)
    assert (daily.commands, daily.errors) == (8, 2)
    codes = {(r.code, r.commands) for r in ReportErrorCode.objects.filter(run=run, tenant=tenant_a, day=today)}
    assert codes == {("EVICTED", 1), ("e.p.me.res.not-found", 1), (reply["code"], 1)}
    assert not ReportCommandType.objects.filter(run=run, tenant=tenant_b).exists()
