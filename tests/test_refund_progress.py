"""A refund's state as Stripe says it, on the ledger and in the desk's words (issue 30): the
gateway's create answer carries Stripe's status, which the ledger records when it settles the
charge, by the one forward-only rule Stripe's events use too
(Charge.objects.record_processor_status); the ticket page, the tickets list, the queue, the API
and the webhooks out say "started, on its way" while Stripe has not finished, "Refunded" only at
`succeeded`, and a failure in the desk's words, all from refunds/selectors.py refund_progress.

Stripe is localstripe, whose refunds are `succeeded` at once; `StripeSays`
(tests/test_stripe_events.py) makes "Stripe" answer `pending` where a test needs it."""

from __future__ import annotations

import json
from itertools import product

import pytest
from django.urls import reverse

from devtools.fake_processor import FakeProcessor
from refunds import lease as leases
from refunds import money, selectors, services
from refunds.models import Charge, Ticket
from refunds.payments import DemoGateway, HttpGateway, Receipt
from refunds.payments.stripe import StripeGateway
from refunds.statuses import PROCESSOR_RANK, ProcessorStatus
from tests.conftest import make_order
from tests.test_stripe_events import StripeSays, paid_ticket
from tests.test_stripe_events import stripe_desk as stripe_desk  # noqa: F401 - a fixture
from tests.test_stripe_events import stripe_says as stripe_says  # noqa: F401 - a fixture
from webhooks import delivery
from webhooks.models import Event

ON_ITS_WAY = "Refund of $6.99 started, on its way to the customer's bank"
CLOSED = (
    "Refund of $6.99 failed. The customer's bank refused the refund: the card is closed. "
    "No money reached them."
)


def refunded_ticket(number: str, processor_status: str, failure_reason: str = "") -> Ticket:
    """A refunded ticket with one paid charge of $6.99 that the processor last said this of."""
    order = make_order(number)
    ticket = Ticket.objects.create(
        thread_id=f"refund-{number}", order=order, status="refunded", amount_cents=699
    )
    Charge.objects.create(
        ticket=ticket,
        order=order,
        idempotency_key=f"refund-{number}:charge_card:{number}:699",
        amount_cents=699,
        status=Charge.Status.SUCCEEDED,
        receipt=f"re_{number}",
        processor_status=processor_status,
        failure_reason=failure_reason,
    )
    return ticket


def pay(gateway, ticket: Ticket) -> str:
    lease = leases.grant(ticket)
    assert lease is not None
    return money.pay(
        gateway=gateway,
        ticket_id=ticket.pk,
        order_id=ticket.order_id,
        lease=lease,
        key=f"{ticket.thread_id}:charge_card:{ticket.order.number}:699",
        amount_cents=699,
    )


# --- the one rule: forward only ---------------------------------------------------------------
@pytest.mark.parametrize("was,said", list(product(ProcessorStatus, ProcessorStatus)))
def test_a_status_moves_only_forward_whatever_order_it_is_said_in(db, was, said):
    charge = Charge.objects.get(ticket=refunded_ticket("5001", was))

    moved = Charge.objects.filter(pk=charge.pk).record_processor_status(said, "declined")

    charge.refresh_from_db()
    forward = said != ProcessorStatus.UNKNOWN and PROCESSOR_RANK[said] >= PROCESSOR_RANK[was]
    assert moved == int(forward)
    assert charge.processor_status == (said if forward else was)


def test_a_late_pending_never_takes_back_succeeded_or_failed(db):
    done = Charge.objects.get(ticket=refunded_ticket("5002", "succeeded"))
    failed = Charge.objects.get(ticket=refunded_ticket("5003", "failed", "declined"))

    assert (
        Charge.objects.filter(pk__in=[done.pk, failed.pk]).record_processor_status("pending") == 0
    )

    assert list(
        Charge.objects.order_by("pk").values_list("processor_status", "failure_reason")
    ) == [
        ("succeeded", ""),
        ("failed", "declined"),
    ]


def test_a_status_the_desk_does_not_know_is_refused(db):
    charge = Charge.objects.get(ticket=refunded_ticket("5004", "pending"))
    with pytest.raises(ValueError):
        Charge.objects.filter(pk=charge.pk).record_processor_status("refunded_maybe")
    charge.refresh_from_db()
    assert charge.processor_status == "pending"


# --- the ledger records what the create call answered -----------------------------------------
def test_the_ledger_records_the_status_stripe_answered_the_refund_with(
    db, stripe_desk, stripe_says
):
    _, pending, refund = paid_ticket(stripe_desk, stripe_says)  # Stripe answered "pending"
    _, done, _ = paid_ticket(stripe_desk)  # localstripe answers "succeeded"

    assert pending.processor_status == "pending"
    assert done.processor_status == "succeeded"
    assert refund["status"] == "succeeded"  # what localstripe itself holds: StripeSays said it


def test_the_gateways_answer_carries_the_status_and_the_flow_gets_a_plain_receipt(
    db, stripe_desk, stripe_says
):
    stripe_says.creating = {"status": "pending"}
    asked = Ticket.objects.create(thread_id="refund-5005", order=stripe_order("5005", stripe_desk))
    paid = Ticket.objects.create(thread_id="refund-5015", order=stripe_order("5015", stripe_desk))
    gateway = StripeGateway()

    answered = gateway.charge(
        idempotency_key="k-5005",
        amount_cents=699,
        ticket_key=asked.thread_id,
        payment_reference=asked.order.payment_reference,
    )
    found = gateway.lookup("k-5005", payment_reference=asked.order.payment_reference)

    assert isinstance(answered, Receipt) and answered.status == "pending"
    assert found == answered and found is not None and found.status == "pending"
    receipt = pay(gateway, paid)  # the ledger's own charge, under its key
    assert type(receipt) is str  # the flow's state (the checkpoint) holds a plain str
    assert Charge.objects.get(ticket=paid).processor_status == "pending"


def stripe_order(number: str, localstripe):
    order = make_order(number)
    order.payment_reference = localstripe.payment_intent(5699)
    order.save(update_fields=["payment_reference"])
    return order


class EventBeforeTheAnswer:
    """Test side: Stripe's gateway, with one of Stripe's events handled while the create call's
    answer is still on its way back (Stripe sends `refund.updated` within a second; the worker
    that handles it can be faster than the one waiting on the answer). The event's handler
    re-reads the refund as `then`; the answer the ledger then settles with says `pending`."""

    def __init__(self, says: StripeSays, then: dict) -> None:
        self.gateway = StripeGateway()
        self.says = says
        self.then = then

    def charge(self, **kwargs) -> str:
        self.says.creating = {"status": "pending"}
        receipt = self.gateway.charge(**kwargs)
        assert isinstance(receipt, Receipt) and receipt.status == "pending"
        self.says.says[receipt] = dict(self.then)
        services.stripe_events.refund_record(self.gateway.refund_now(receipt))
        return receipt

    def lookup(self, idempotency_key: str, *, payment_reference: str = "") -> str | None:
        return self.gateway.lookup(idempotency_key, payment_reference=payment_reference)

    def payment_refunds(self, payment_reference: str) -> list:
        return self.gateway.payment_refunds(payment_reference)

    def payment_disputes(self, payment_reference: str) -> list:
        return self.gateway.payment_disputes(payment_reference)


@pytest.mark.parametrize(
    "then",
    [
        {"status": "succeeded"},
        {"status": "failed", "failure_reason": "expired_or_canceled_card"},
    ],
)
def test_an_event_handled_before_the_create_answer_is_settled_is_not_taken_back(
    db, stripe_desk, stripe_says, then
):
    """The late guard: the settle's "pending" lands after the event's newer word and keeps it."""
    ticket = Ticket.objects.create(thread_id="refund-5006", order=stripe_order("5006", stripe_desk))

    pay(EventBeforeTheAnswer(stripe_says, then), ticket)

    charge = Charge.objects.get(ticket=ticket)
    assert charge.status == Charge.Status.SUCCEEDED and charge.receipt
    assert (charge.processor_status, charge.failure_reason) == (
        then["status"],
        then.get("failure_reason", ""),
    )


def test_the_demo_processor_says_succeeded_and_a_gateway_that_says_nothing_records_nothing(db):
    demo = Ticket.objects.create(thread_id="refund-5007", order=make_order("5007"))
    http = Ticket.objects.create(thread_id="refund-5008", order=make_order("5008"))
    processor = FakeProcessor().start()
    try:
        pay(DemoGateway(), demo)
        pay(HttpGateway(processor.url), http)
    finally:
        processor.stop()

    assert Charge.objects.get(ticket=demo).processor_status == "succeeded"
    assert Charge.objects.get(ticket=http).processor_status == ""


# --- the desk's words, from one selector ------------------------------------------------------
def test_the_words_follow_what_the_processor_said_last(db):
    words = {
        status: selectors.refund_progress(refunded_ticket(f"51{i}", status, reason))
        for i, (status, reason) in enumerate(
            [
                ("", ""),
                ("pending", ""),
                ("requires_action", ""),
                ("succeeded", ""),
                ("failed", "expired_or_canceled_card"),
                ("canceled", ""),
            ]
        )
    }

    assert words[""] == {"state": "refunded", "words": "Refunded"}
    assert words["pending"] == {"state": "on_its_way", "words": ON_ITS_WAY}
    assert words["requires_action"] == {"state": "on_its_way", "words": ON_ITS_WAY}
    assert words["succeeded"] == {"state": "refunded", "words": "Refunded"}
    assert words["failed"] == {"state": "failed", "words": CLOSED}
    assert words["canceled"] == {
        "state": "failed",
        "words": "Refund of $6.99 failed. The refund was canceled at Stripe. "
        "No money reached them.",
    }
    assert selectors.refund_progress(Ticket(status="awaiting_review")) is None


def test_a_failure_handed_back_and_refunded_again_no_longer_speaks_for_the_ticket(db):
    ticket = refunded_ticket("5301", "failed", "expired_or_canceled_card")
    Charge.objects.filter(ticket=ticket).update(handed_back_at="2026-12-05T08:00:00Z")
    Charge.objects.create(
        ticket=ticket,
        order=ticket.order,
        idempotency_key="refund-5301:charge_card:5301:699:again1",
        amount_cents=699,
        status=Charge.Status.SUCCEEDED,
        receipt="re_5301_again",
        processor_status="pending",
    )

    assert selectors.refund_progress(ticket) == {"state": "on_its_way", "words": ON_ITS_WAY}


def test_the_tickets_list_and_the_queue_say_where_the_money_is(
    db, client, manager, django_assert_max_num_queries
):
    on_its_way = refunded_ticket("5401", "pending")
    done = refunded_ticket("5402", "succeeded")
    failed = refunded_ticket("5403", "failed", "expired_or_canceled_card")
    Ticket.objects.filter(pk__in=[on_its_way.pk, done.pk, failed.pk]).update(opened_by=manager)
    client.force_login(manager)

    listed = client.get(reverse("reviews:tickets")).content.decode()
    queue = client.get(reverse("reviews:queue")).content.decode()

    for html in (listed, queue):
        assert pill(on_its_way, "on_its_way", ON_ITS_WAY.replace("'", "&#x27;")) in html
        assert pill(done, "refunded", "Refunded") in html
        assert pill(failed, "failed", CLOSED.replace("'", "&#x27;")) in html
    tickets = list(Ticket.objects.all())
    with django_assert_max_num_queries(1):  # one query for a page of tickets, not one each
        assert len(selectors.refund_progress_of(tickets)) == 3


def pill(ticket: Ticket, state: str, words: str) -> str:
    return f'<span class="status status-{state}" data-ticket="{ticket.pk}">{words}</span>'


def test_the_api_gives_the_refund_state_and_its_words(db, client, manager):
    ticket = refunded_ticket("5501", "pending")
    open_one = Ticket.objects.create(thread_id="refund-5502", order=make_order("5502"))
    client.force_login(manager)

    one = client.get(f"/api/tickets/{ticket.pk}/").json()
    listed = {t["id"]: t for t in client.get("/api/tickets/").json()["results"]}

    assert (one["refund_state"], one["refund_words"]) == ("on_its_way", ON_ITS_WAY)
    assert one["charges"][0]["processor_status"] == "pending"
    assert listed[ticket.pk]["refund_state"] == "on_its_way"
    assert (listed[open_one.pk]["refund_state"], listed[open_one.pk]["refund_words"]) == (
        None,
        None,
    )


def test_a_webhook_goes_out_when_a_refunded_tickets_refund_moves_and_says_where_it_is(db):
    ticket = refunded_ticket("5601", "pending")
    charge = Charge.objects.get(ticket=ticket)
    Event.objects.all().delete()

    Charge.objects.filter(pk=charge.pk).record_processor_status("pending")  # no change
    assert not Event.objects.exists()
    Charge.objects.filter(pk=charge.pk).record_processor_status("succeeded")

    [event] = Event.objects.all()
    sent = delivery.payload(event)
    assert sent["type"] == "ticket.refund_state_changed"
    said = sent["data"]["ticket"]
    assert (said["status"], said["previous_status"]) == ("refunded", "refunded")
    assert (said["refund_state"], said["refund_words"]) == ("refunded", "Refunded")
    json.dumps(sent)  # as it is POSTed


def test_a_status_change_to_refunded_says_the_refund_is_on_its_way(db):
    ticket = Ticket.objects.create(thread_id="refund-5701", order=make_order("5701"))
    Charge.objects.create(
        ticket=ticket,
        order=ticket.order,
        idempotency_key="refund-5701:k",
        amount_cents=699,
        status=Charge.Status.SUCCEEDED,
        receipt="re_5701",
        processor_status="pending",
    )
    Ticket.objects.filter(pk=ticket.pk).update(status="refunded")

    event = Event.objects.filter(ticket=ticket).order_by("pk").last()
    assert event is not None
    sent = delivery.payload(event)
    assert sent["type"] == "ticket.status_changed"
    assert (sent["data"]["ticket"]["refund_state"], sent["data"]["ticket"]["refund_words"]) == (
        "on_its_way",
        ON_ITS_WAY,
    )
