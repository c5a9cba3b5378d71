"""The whole slice with a real Celery worker process on the real broker (not eager mode)."""

import pytest
from django.urls import reverse

from refunds.models import Charge, Email, Ticket
from tests.conftest import wait_for

pytestmark = pytest.mark.slow


def status_of(ticket_id: int) -> str:
    return Ticket.objects.get(pk=ticket_id).status


def test_a_ticket_goes_from_opened_to_refunded_through_a_real_worker(
    workers, client, agent, late_order
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

    response = client.post(
        reverse("reviews:decide", args=[ticket.pk]),
        {"interrupt_id": ticket.pending_interrupt_id, "approve": "1"},
    )
    assert response.status_code == 302

    wait_for(lambda: status_of(ticket.pk) == "refunded", what="the refund")
    assert Charge.objects.filter(ticket=ticket).count() == 1
    assert Email.objects.filter(ticket=ticket, sent_at__isnull=False).count() == 1
    ticket.refresh_from_db()
    assert ticket.nodes_run[-3:] == ["approve", "charge_card", "email"]
    assert ticket.decisions.get().applied_at is not None


def test_an_on_time_order_is_declined_by_policy_without_a_review(
    workers, client, agent, on_time_order
):
    workers("w1")
    client.force_login(agent)
    client.post(reverse("reviews:ticket_new"), {"order_number": "1043"})
    ticket = Ticket.objects.get()
    wait_for(lambda: status_of(ticket.pk) == "declined", what="the decline")
    ticket.refresh_from_db()
    assert "arrived 1 day early" in ticket.outcome_reason
    assert ticket.decisions.count() == 0 and ticket.charges.count() == 0
