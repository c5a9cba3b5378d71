"""A disputed payment (issue 30): before every charge the ledger asks the processor for the
payment's disputes (refunds/money.py, disputes_look_up); one still open stops the charge and sends
the ticket to a manager with "This payment is disputed: refunding it may pay the customer twice.",
and the manager's approval of that review charges once. Stripe's dispute events are stored once,
re-read and recorded against the order; the charge never waits for one.

Stripe is localstripe, and the refunds are counted there. localstripe has no disputes: its
launcher (devtools/localstripe.py) serves Stripe's `GET /v1/disputes` and `/v1/disputes/<id>`
test-side, for the disputes a test opens with `localstripe.dispute()`. That is the gap these
tests cover; everything else (payments, refunds) is the emulator's own."""

from __future__ import annotations

import pytest
from django.urls import reverse
from django.utils import timezone

from core.clock import day_words
from insights.metrics import DeskCollector
from refunds import payments, runner, services
from refunds.models import Charge, PaymentDispute, StripeEvent, Ticket
from refunds.payments import DemoGateway, HttpGateway
from refunds.payments.demo import DemoProcessorDispute
from refunds.payments.stripe import StripeGateway
from tests import test_outside_refunds, test_stripe_events
from tests.test_outside_refunds import PAID, at_stripe, paid_order
from tests.test_stripe_events import event

# The fixtures of those tests, shared.
stripe_here = test_outside_refunds.stripe_here
stripe_desk = test_stripe_events.stripe_desk
sent = test_stripe_events.sent
deliver = test_stripe_events.deliver


def today() -> str:
    return day_words(timezone.localdate())


SENTENCE = "This payment is disputed: refunding it may pay the customer twice."


def reviewed(order) -> Ticket:
    """A ticket for the order, checked and waiting on its (agent's) review."""
    ticket = services.ticket_open(order_number=order.number)
    assert runner.advance(ticket.pk) == "awaiting_review"
    ticket.refresh_from_db()
    return ticket


def approve(ticket: Ticket, reviewer) -> str:
    """The reviewer approves the pending review; a worker applies it. Where the thread stands."""
    ticket.refresh_from_db()
    services.ticket_decide(
        ticket=ticket,
        interrupt_id=ticket.pending_interrupt_id,
        reviewer=reviewer,
        orders=services.review_answers(ticket, answer="approve"),
    )
    return runner.advance(ticket.pk)


def disputed_at_review(stripe, manager) -> tuple[Ticket, object]:
    """A ticket whose payment the customer's bank disputes after the review was asked for: the
    approval's charge stops for it. No event arrives: the ledger asked Stripe."""
    order = paid_order(stripe.payment_intent(PAID))
    ticket = reviewed(order)
    stripe.dispute(order.payment_reference, amount_cents=PAID)
    assert approve(ticket, manager) == "awaiting_review"
    ticket.refresh_from_db()
    return ticket, order


# --- the pre-charge check ---------------------------------------------------------------------
def test_a_disputed_payment_goes_to_a_manager_with_why_and_refunds_nothing_at_stripe(
    transactional_db, stripe_here, manager, client
):
    ticket, order = disputed_at_review(stripe_here, manager)

    payload = ticket.pending_payload
    assert ticket.required_role == "manager"
    assert payload["payment_error"] == SENTENCE
    assert payload["disputed"] == [order.number]
    assert f"**{SENTENCE}** No money moved." in payload["description"]
    assert at_stripe(stripe_here, order) == []  # nothing refunded at Stripe
    assert not Charge.objects.filter(ticket=ticket).exists()  # nor reserved in the ledger
    [dispute] = PaymentDispute.objects.all()
    assert (dispute.order, dispute.status, dispute.is_open) == (order, "needs_response", True)
    assert dispute.said().startswith("Payment disputed on ")

    client.force_login(manager)
    card = client.get(reverse("reviews:queue")).content.decode()
    page = client.get(reverse("reviews:ticket", args=[ticket.pk])).content.decode()
    assert SENTENCE in card
    assert SENTENCE in page
    gauges = {m.name: m.samples[0].value for m in DeskCollector().collect() if m.samples}
    assert gauges["refund_desk_tickets_disputed"] == 1


def test_the_managers_approval_after_the_warning_refunds_once(
    transactional_db, stripe_here, manager
):
    """The dispute is still open: the manager read the warning and approved all the same, so
    the charge is made (once), not sent back to them again."""
    ticket, order = disputed_at_review(stripe_here, manager)

    assert approve(ticket, manager) == "refunded"

    assert at_stripe(stripe_here, order) == [(699, True)]
    [charge] = Charge.objects.filter(ticket=ticket)
    assert (charge.amount_cents, charge.status) == (699, "succeeded")
    ticket.refresh_from_db()
    assert ticket.status == "refunded"


@pytest.mark.parametrize("ended", ["won", "lost"])
def test_a_payment_whose_dispute_closed_is_refunded_as_any_other(
    transactional_db, stripe_here, manager, ended
):
    order = paid_order(stripe_here.payment_intent(PAID))
    ticket = reviewed(order)
    dispute = stripe_here.dispute(order.payment_reference, amount_cents=PAID)
    stripe_here.dispute_closes(dispute, ended)

    assert approve(ticket, manager) == "refunded"

    assert at_stripe(stripe_here, order) == [(699, True)]
    assert PaymentDispute.objects.get().status == ended


def test_a_payment_nobody_disputed_lists_no_dispute(db, stripe_here):
    reference = stripe_here.payment_intent(PAID)
    gateway = StripeGateway(api_base=stripe_here.url)
    assert gateway.payment_disputes(reference) == []


# --- Stripe's dispute events ------------------------------------------------------------------
def test_dispute_events_are_stored_once_and_recorded_as_stripe_holds_them_now(
    db, stripe_desk, deliver
):
    order = paid_order(stripe_desk.payment_intent(PAID))
    dispute_id = stripe_desk.dispute(order.payment_reference, amount_cents=PAID)
    opened = StripeGateway().dispute_now(dispute_id)
    created = event("charge.dispute.created", opened, event_id="evt_dispute_opened")

    deliver(created)
    deliver(created)  # Stripe sends it again

    assert StripeEvent.objects.filter(event_id="evt_dispute_opened").count() == 1
    [row] = PaymentDispute.objects.all()
    assert (row.order, row.status, row.amount_cents) == (order, "needs_response", PAID)

    # The bank decided; the closing event arrives, and then a late copy of "created": the
    # handler records what Stripe holds now, not what either event's payload said.
    stripe_desk.dispute_closes(dispute_id, "won")
    deliver(event("charge.dispute.closed", opened | {"status": "won"}))
    deliver(event("charge.dispute.created", opened))

    row.refresh_from_db()
    assert row.status == "won" and not row.is_open
    assert StripeEvent.objects.filter(handled_at__isnull=False).count() == 3


def test_the_ticket_page_says_the_payment_is_disputed_before_anyone_approves(
    db, stripe_desk, deliver, client, manager
):
    order = paid_order(stripe_desk.payment_intent(PAID))
    dispute_id = stripe_desk.dispute(order.payment_reference, amount_cents=PAID)
    deliver(event("charge.dispute.created", StripeGateway().dispute_now(dispute_id)))
    ticket = reviewed(order)
    client.force_login(manager)

    page = client.get(reverse("reviews:ticket", args=[ticket.pk])).content.decode()

    assert f'<p class="dispute error" data-processor-id="{dispute_id}">' in page
    assert (
        f"$56.99 of the payment disputed by the customer&#x27;s bank on {today()}. {SENTENCE}"
    ) in page

    stripe_desk.dispute_closes(dispute_id, "won")
    deliver(event("charge.dispute.closed", StripeGateway().dispute_now(dispute_id)))
    page = client.get(reverse("reviews:ticket", args=[ticket.pk])).content.decode()
    assert f'<p class="dispute" data-processor-id="{dispute_id}">' in page
    assert f"bank on {today()}; closed (won).</p>" in page
    assert "refunding it may pay the customer twice" not in page


def test_a_dispute_of_a_payment_no_order_names_records_nothing(db, stripe_desk, deliver):
    reference = stripe_desk.payment_intent(PAID)
    dispute_id = stripe_desk.dispute(reference)

    deliver(event("charge.dispute.created", StripeGateway().dispute_now(dispute_id)))

    assert not PaymentDispute.objects.exists()
    assert "no order" in StripeEvent.objects.get().outcome


# --- the other gateways -----------------------------------------------------------------------
def test_the_demo_processor_marks_a_payment_disputed_for_the_demo(
    transactional_db, settings, manager, request
):
    settings.REFUNDS_GATEWAY = "refunds.payments.DemoGateway"
    payments.get_gateway.cache_clear()
    request.addfinalizer(payments.get_gateway.cache_clear)
    order = paid_order("pi_DemoDisputed")
    ticket = reviewed(order)
    DemoProcessorDispute.objects.create(payment_reference="pi_DemoDisputed")

    assert approve(ticket, manager) == "awaiting_review"
    ticket.refresh_from_db()
    assert ticket.pending_payload["payment_error"] == SENTENCE
    assert DemoGateway().payment_refunds("pi_DemoDisputed") == []  # nothing refunded
    assert approve(ticket, manager) == "refunded"
    assert len(DemoGateway().payment_refunds("pi_DemoDisputed")) == 1


def test_the_http_gateway_lists_a_payments_disputes(db, sinks):
    gateway = HttpGateway(base_url=sinks.gateway.url)
    sinks.gateway.dispute("pay_2001")
    sinks.gateway.dispute("pay_2001", status="lost")

    listed = gateway.payment_disputes("pay_2001")

    assert sorted((d.status, d.open) for d in listed) == [
        ("lost", False),
        ("needs_response", True),
    ]
    assert gateway.payment_disputes("pay_2002") == []
