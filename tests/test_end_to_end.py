"""The whole slice with a real Celery worker process on the real broker (not eager mode)."""

import pytest
from django.urls import reverse

from refunds.models import Charge, Email, Ticket
from tests.conftest import wait_for

pytestmark = pytest.mark.slow


def status_of(ticket_id: int) -> str:
    return Ticket.objects.get(pk=ticket_id).status


def test_a_ticket_goes_from_opened_to_refunded_through_a_real_worker(
    workers, sinks, client, agent, admin_user, late_order
):
    workers("w1")
    client.force_login(agent)
    response = client.post(reverse("reviews:ticket_new"), {"order_number": "1042", "note": "late"})
    assert response.status_code == 302
    ticket = Ticket.objects.get()

    wait_for(lambda: status_of(ticket.pk) == "awaiting_review", what="the review")
    ticket.refresh_from_db()
    assert ticket.required_role == "agent"
    assert ticket.pending_payload["action_request"]["args"]["amount_cents"] == 699

    client.force_login(admin_user)
    response = client.post(
        reverse("reviews:decide", args=[ticket.pk]),
        {"interrupt_id": ticket.pending_interrupt_id, "approve": "1"},
    )
    assert response.status_code == 302

    wait_for(lambda: status_of(ticket.pk) == "refunded", what="the refund")
    # Counted where the effects land: one refund at the processor, one message at the server.
    refunds = sinks.gateway.refunds_for(ticket.thread_id)
    assert [r["amount_cents"] for r in refunds] == [699]
    assert sinks.smtp.keys() == {f"{ticket.thread_id}:email": 1}
    assert Charge.objects.get(ticket=ticket).receipt == refunds[0]["receipt"]
    assert Email.objects.get(ticket=ticket).status == "sent"
    ticket.refresh_from_db()
    assert ticket.nodes_run[-4:] == ["approve", "charge_order:1042", "settle_charges", "email"]
    assert ticket.decisions.get().applied_at is not None


def test_an_on_time_order_is_declined_by_policy_without_a_review(
    workers, sinks, client, agent, on_time_order
):
    workers("w1")
    client.force_login(agent)
    client.post(reverse("reviews:ticket_new"), {"order_number": "1043"})
    ticket = Ticket.objects.get()
    wait_for(lambda: status_of(ticket.pk) == "declined", what="the decline")
    ticket.refresh_from_db()
    assert "arrived 1 day early" in ticket.outcome_reason
    assert ticket.decisions.count() == 0 and ticket.charges.count() == 0
    assert sinks.gateway.charge_calls == {}
    wait_for(lambda: sinks.smtp.count(ticket.thread_id) == 1, what="the email saying why")
    assert sinks.smtp.keys() == {f"{ticket.thread_id}:notify": 1}
