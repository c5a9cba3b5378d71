"""A ticket of three orders with a real Celery worker process on the real broker (issue 18): one
declined by policy, one flagged, reviewed per order on the page; the money and the mail counted
where they land (the payment processor over HTTP, the SMTP server)."""

import pytest
from django.urls import reverse

from refunds import services
from refunds.models import Charge, Email, Ticket
from tests.conftest import make_order, wait_for

pytestmark = pytest.mark.slow


def status_of(ticket_id: int) -> str:
    return Ticket.objects.get(pk=ticket_id).status


def test_a_three_order_ticket_is_reviewed_per_order_and_refunded_through_a_real_worker(
    workers, sinks, client, manager
):
    workers("w1")
    make_order("1042", late=4, fee_cents=699, name="Iris Lund")
    make_order("1043", late=-1, fee_cents=499, name="Iris Lund")  # on time: declined by policy
    make_order("1049", late=5, fee_cents=15000, name="Iris Lund")  # $150.00: flagged
    ticket = services.ticket_open(order_numbers=["1042", "1043", "1049"])

    wait_for(lambda: status_of(ticket.pk) == "awaiting_review", what="the review")
    ticket.refresh_from_db()
    assert ticket.required_role == "manager"
    lines = {o["number"]: o for o in ticket.pending_payload["orders"]}
    assert lines["1043"]["status"] == "declined" and lines["1049"]["flags"]

    client.force_login(manager)
    form = {
        "interrupt_id": ticket.pending_interrupt_id,
        "orders": "1",
        "order-1042": "approve",
        "order-1049": "reject",
        "reason": "A fee this high needs the carrier's report.",
    }
    assert client.post(reverse("reviews:decide", args=[ticket.pk]), form).status_code == 302

    wait_for(lambda: status_of(ticket.pk) == "refunded", what="the refund")
    key = f"{ticket.thread_id}:charge_card:1042:699"
    assert dict(sinks.gateway.charge_calls) == {key: 1}
    assert [r["amount_cents"] for r in sinks.gateway.refunds.values()] == [699]
    charge = Charge.objects.get(ticket=ticket)
    assert (charge.order.number, charge.amount_cents, charge.idempotency_key) == ("1042", 699, key)
    assert charge.receipt == sinks.gateway.refunds[key]["receipt"]
    wait_for(lambda: sinks.smtp.count(ticket.thread_id) == 1, what="the email")
    assert sinks.smtp.keys() == {f"{ticket.thread_id}:email": 1}
    email = Email.objects.get(ticket=ticket)
    assert "Order 1042: $6.99" in email.body and "carrier's report" in email.body
    assert ticket.decisions.get().applied_at is not None
