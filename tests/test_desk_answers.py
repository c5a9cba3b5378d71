"""The desk's answers carried through the real graph in this process (runner.advance): a
manager's lower amount ("edit"), a rejection's customer reason and its internal note, and bulk
approve where one pick is invalid. Money is counted at the demo processor, mail in the outbox."""

from __future__ import annotations

import pytest
from django.urls import reverse

from refunds import enqueue, persistence, runner, services
from refunds.models import (
    AuditEvent,
    CannedReason,
    Charge,
    Decision,
    Email,
    Ticket,
)
from refunds.payments.demo import DemoProcessorRefund
from tests.conftest import make_order


@pytest.fixture(autouse=True)
def _no_broker(monkeypatch):
    monkeypatch.setattr(enqueue, "wake", lambda ticket_id: True)  # the test advances itself


def review(number: str, fee_cents: int) -> Ticket:
    make_order(number, fee_cents=fee_cents, name=f"Customer {number}")
    ticket = services.ticket_open(order_number=number)
    assert runner.advance(ticket.pk) == "awaiting_review"
    ticket = Ticket.objects.get(pk=ticket.pk)
    assert ticket.review_since is not None  # the review's clock, written with the mirror
    return ticket


def test_a_manager_lowers_the_amount_and_the_lower_amount_is_paid_once(
    transactional_db, client, manager
):
    ticket = review("7001", 4800)
    assert ticket.pending_payload["config"]["allow_edit"] is True
    client.force_login(manager)
    form = {"interrupt_id": ticket.pending_interrupt_id, "approve": "1", "amount": "30.00"}
    response = client.post(reverse("reviews:decide", args=[ticket.pk]), form, follow=True)
    assert (
        "Approved $30.00 (instead of $48.00) for order 7001 — being paid out"
        in response.content.decode()
    )
    assert runner.advance(ticket.pk) == "refunded"

    charge = Charge.objects.get(ticket=ticket)
    assert (charge.amount_cents, charge.idempotency_key) == (
        3000,
        f"{ticket.thread_id}:charge_card:7001:3000",
    )
    assert [r.amount_cents for r in DemoProcessorRefund.objects.all()] == [3000]
    assert (
        "We have started a refund of $30.00 of the $48.00 you asked for"
        in Email.objects.get(ticket=ticket).body
    )
    event = AuditEvent.objects.get(ticket=ticket, action="edit")
    assert (event.answer["asked_cents"], event.answer["amount_cents"]) == (4800, 3000)
    html = client.get(reverse("reviews:ticket", args=[ticket.pk])).content.decode()
    assert "manager lowered the amount from $48.00 to $30.00 and approved it." in html


@pytest.mark.parametrize("amount", ["48.00", "60", "0", "-1", "abc", "1.234"])
def test_a_manager_cannot_raise_or_zero_the_amount(client, manager, amount, big_order):
    from tests.reviewing import awaiting_review

    ticket = awaiting_review(big_order)
    client.force_login(manager)
    form = {"interrupt_id": ticket.pending_interrupt_id, "approve": "1", "amount": amount}
    client.post(reverse("reviews:decide", args=[ticket.pk]), form)
    decision = Decision.objects.filter(ticket=ticket).first()
    # $48.00 is the amount asked: a plain approval. Anything else is refused.
    assert (decision is not None) == (amount == "48.00")


def test_a_rejection_tells_the_customer_the_reason_and_never_the_internal_note(
    transactional_db, client, agent
):
    ticket = review("7002", 699)
    canned = CannedReason.objects.create(  # admins keep these (the migration seeds a few)
        title="On time", text="Our records show the order arrived on the promised date."
    )
    client.force_login(agent)
    form = {
        "interrupt_id": ticket.pending_interrupt_id,
        "reject": "1",
        "canned": canned.pk,
        "reason": "Tracking shows it on the 2nd.",
        "note": "Customer called three times; INTERNAL-ONLY",
    }
    assert client.post(reverse("reviews:decide", args=[ticket.pk]), form).status_code == 302
    assert runner.advance(ticket.pk) == "rejected"

    body = Email.objects.get(ticket=ticket).body
    assert canned.text in body and "Tracking shows it on the 2nd." in body
    assert "INTERNAL-ONLY" not in body
    decision = Decision.objects.get(ticket=ticket)
    assert decision.note == "Customer called three times; INTERNAL-ONLY"
    assert "INTERNAL-ONLY" not in str(persistence.snapshot(ticket.thread_id).values)
    html = client.get(reverse("reviews:ticket", args=[ticket.pk])).content.decode()
    assert "Internal note: Customer called three times; INTERNAL-ONLY" in html


def test_bulk_approve_refunds_the_valid_reviews_once_each_and_reports_the_invalid_one(
    transactional_db, client, agent
):
    good = [review(f"710{n}", 500 + n) for n in range(3)]
    big = review("7110", 4800)  # a manager's: not the agent's to approve
    stale = review("7111", 650)
    picks = [f"{t.pk}:{t.pending_interrupt_id}" for t in good]
    picks += [f"{big.pk}:{big.pending_interrupt_id}", f"{stale.pk}:not-the-pending-one"]
    client.force_login(agent)
    response = client.post(
        reverse("reviews:bulk_approve"), {"pick": picks}, headers={"HX-Request": "true"}
    )
    html = response.content.decode()
    assert response.status_code == 200 and "queueChanged" in response["HX-Trigger"]
    assert html.count("✔") == 3 and html.count("✖") == 2
    assert "Order 7111: ✖ This review is no longer pending" in html
    # The manager's review is not visible to the agent at all.
    assert f'data-ticket="{big.pk}"' in html and "There is no ticket" in html
    for ticket in (*good, big, stale):
        runner.advance(ticket.pk)
        runner.advance(ticket.pk)  # a second delivery of the wake-up changes nothing

    for ticket in good:
        assert Ticket.objects.get(pk=ticket.pk).status == "refunded"
        assert Charge.objects.filter(ticket=ticket).count() == 1
        key = f"{ticket.thread_id}:charge_card:{ticket.order.number}:{ticket.amount_cents}"
        assert DemoProcessorRefund.objects.filter(idempotency_key=key).count() == 1
    for ticket in (big, stale):
        assert Ticket.objects.get(pk=ticket.pk).status == "awaiting_review"
        assert not Charge.objects.filter(ticket=ticket).exists()
    assert AuditEvent.objects.filter(action="approve", actor=agent).count() == 3
