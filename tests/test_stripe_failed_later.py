"""A refund Stripe fails after the desk made it (issue 30): its money goes back to the order's
balance, the ticket's thread goes back to a manager's review with the failure in the desk's words,
the customer gets one failure email at the SMTP sink, and approving again makes a new refund at
localstripe under a new key. The real graph runs in this process (runner.advance); Stripe is
localstripe, with `StripeSays` (tests/test_stripe_events.py) saying "failed", which localstripe
cannot."""

from __future__ import annotations

import pytest
from django.urls import reverse

from devtools.faults import fired
from devtools.localstripe import StripeFaults
from refunds import (
    enqueue,
    money,
    payments,
    persistence,
    policy,
    runner,
    selectors,
    services,
    tasks,
)
from refunds.flow.nodes.review import failed_later
from refunds.models import AuditEvent, Charge, Email, StripeEvent, Ticket
from refunds.services.stripe_events import HANDLE
from tests import test_crash
from tests.conftest import give_lines, make_order, wait_for
from tests.quiescence import quiesce
from tests.test_stripe_events import WEBHOOK_SECRET, event, post
from tests.test_stripe_events import stripe_desk as stripe_desk  # noqa: F401 - a fixture
from tests.test_stripe_events import stripe_says as stripe_says  # noqa: F401 - a fixture

PAID = 5699
CLOSED = "The customer's bank refused the refund: the card is closed. No money reached them."


@pytest.fixture
def woken(monkeypatch) -> list[tuple[str, int]]:
    """What was handed to workers (task name, row id), in place of the broker."""
    handed: list[tuple[str, int]] = []
    monkeypatch.setattr(enqueue, "send", lambda task, pk: handed.append((task, pk)) or True)
    return handed


@pytest.fixture
def desk(settings, stripe_desk, smtp, woken, request):
    settings.REFUNDS_GATEWAY = "refunds.payments.stripe.StripeGateway"
    payments.get_gateway.cache_clear()  # one gateway per process, built from the settings
    request.addfinalizer(payments.get_gateway.cache_clear)
    return stripe_desk


def deliver(client, woken, body: dict) -> None:
    """Stripe posts the event; the workers it woke run here, as Celery would run them."""
    woken.clear()
    response = post(client, body)
    assert response.status_code == 200, response.content

    for task, pk in list(woken):
        if task == HANDLE:
            tasks.handle_stripe_event(pk)


def refunded(localstripe, number: str, manager) -> Ticket:
    order = make_order(number, fee_cents=699)
    order.payment_reference = localstripe.payment_intent(PAID)
    order.save(update_fields=["payment_reference"])
    ticket = services.ticket_open(order_number=number)
    assert runner.advance(ticket.pk) == "awaiting_review"
    ticket.refresh_from_db()
    services.ticket_decide(
        ticket=ticket,
        interrupt_id=ticket.pending_interrupt_id,
        reviewer=manager,
        orders=services.review_answers(ticket, answer="approve"),
    )
    assert runner.advance(ticket.pk) == "refunded"
    return Ticket.objects.get(pk=ticket.pk)


def test_a_refund_stripe_fails_later_goes_back_to_a_manager_and_the_customer_is_told_once(
    transactional_db, client, manager, desk, smtp, woken, stripe_says
):
    ticket = refunded(desk, "4301", manager)
    charge = Charge.objects.get(ticket=ticket)
    [first] = smtp.delivered  # read at the SMTP server: started, not "refunded"
    said = " ".join(first.body.split())
    assert "We have started a refund of $6.99 in shipping for order 4301" in said
    assert "a refund usually takes 5 to 10 business days to show on your statement" in said
    [refund] = desk.refunds(ticket.order.payment_reference)
    assert money.refundable_cents(ticket.order) == 0
    stripe_says.says[refund["id"]] = {
        "status": "failed",
        "failure_reason": "expired_or_canceled_card",
    }

    # Sent twice and out of order: the failure, an older "updated", the failure again.
    failed = event("refund.failed", refund)
    deliver(client, woken, failed)
    assert ("refunds.tasks.advance_ticket", ticket.pk) in woken
    deliver(client, woken, event("refund.updated", refund | {"status": "succeeded"}))
    assert runner.advance(ticket.pk) == "awaiting_review"
    deliver(client, woken, failed)
    deliver(client, woken, event("charge.refund.updated", refund))
    assert runner.advance(ticket.pk) == "awaiting_review"  # nothing more to hand back

    ticket.refresh_from_db()
    charge.refresh_from_db()
    assert ticket.status == "awaiting_review"
    assert ticket.required_role == "manager"
    assert (
        "The customer's bank refused the refund: the card is closed"
        in (ticket.pending_payload["description"])
    )
    assert charge.handed_back_at is not None
    assert money.refundable_cents(ticket.order) == 699  # the balance is back
    assert (
        AuditEvent.objects.filter(ticket=ticket, action="refund_failed", note=CLOSED).count() == 1
    )
    failures = [d for d in smtp.delivered if ":refund_failed:" in d.key]
    assert len(failures) == 1
    assert failures[0].subject == "Your refund for order 4301 did not go through"
    said = " ".join(failures[0].body.split())
    assert "The refund of $6.99 for order 4301 did not reach you: your bank or card" in said

    # A manager approves again: a new refund at Stripe, under a key of its own.
    services.ticket_decide(
        ticket=ticket,
        interrupt_id=ticket.pending_interrupt_id,
        reviewer=manager,
        orders=services.review_answers(ticket, answer="approve"),
    )
    assert runner.advance(ticket.pk) == "refunded"
    keys = list(
        Charge.objects.filter(ticket=ticket)
        .order_by("pk")
        .values_list("idempotency_key", flat=True)
    )
    assert keys == [charge.idempotency_key, f"{charge.idempotency_key}:again1"]
    assert sorted(r["amount"] for r in desk.refunds(ticket.order.payment_reference)) == [699, 699]
    assert money.refundable_cents(ticket.order) == 0
    ticket.refresh_from_db()
    assert selectors.refund_progress(ticket) == {"state": "refunded", "words": "Refunded"}
    # The failure email promised to write again: one more "started", for the new refund.
    started = [d for d in smtp.delivered if d.key.startswith(f"{ticket.thread_id}:email")]
    assert [d.key for d in started] == [
        f"{ticket.thread_id}:email",
        f"{ticket.thread_id}:email:again1",
    ]
    assert "We have started a refund of $6.99" in " ".join(started[1].body.split())
    assert not any("We refunded" in d.body for d in smtp.delivered)
    assert len([d for d in smtp.delivered if ":refund_failed:" in d.key]) == 1
    assert Email.objects.filter(ticket=ticket, key__contains=":refund_failed:").count() == 1


def test_a_failed_refund_whose_wake_up_was_lost_is_handed_back_by_the_sweep(
    transactional_db, client, manager, desk, woken, stripe_says
):
    ticket = refunded(desk, "4302", manager)
    [refund] = desk.refunds(ticket.order.payment_reference)
    stripe_says.says[refund["id"]] = {"status": "canceled"}
    deliver(client, woken, event("refund.updated", refund))
    assert ticket in Ticket.objects.needing_worker()  # the wake-up was only a signal

    assert runner.advance(ticket.pk) == "awaiting_review"

    assert ticket not in Ticket.objects.needing_worker()
    ticket.refresh_from_db()
    assert "The refund was canceled at Stripe" in ticket.pending_payload["description"]


# --- what the manager reads once a failed refund is back ---------------------------------------
def failed_back(desk, client, woken, ticket: Ticket) -> Ticket:
    """Stripe fails the ticket's refund (localstripe's launcher says so on every read from now
    on) and its `refund.failed` comes in: the thread goes back to a manager."""
    receipt = Charge.objects.get(ticket=ticket).receipt
    assert receipt
    refund_failed, _ = desk.fail_refund(receipt)
    deliver(client, woken, refund_failed)
    assert runner.advance(ticket.pk) == "awaiting_review"
    return Ticket.objects.get(pk=ticket.pk)


def test_the_ticket_page_says_the_refund_failed_never_refunded_and_why_once(
    transactional_db, client, manager, desk, woken
):
    ticket = failed_back(desk, client, woken, refunded(desk, "4311", manager))
    client.force_login(manager)

    page = client.get(reverse("reviews:ticket", args=[ticket.pk])).content.decode()

    assert ticket.outcome_reason == ""  # the first run's "Refunded $6.99." is not true now
    assert 'id="ticket-outcome"' not in page
    assert "Refunded $6.99" not in page
    # The ledger's line for the refund says it failed, not "Refunded".
    assert (
        '<span class="processor-status processor-failed">Refund of $6.99 failed; the money '
        "came back</span>"
    ) in page
    # The review says what happened once, in the desk's words; a failure after the refund was
    # made is not "The charge was refused ... No money moved".
    review = " ".join([ticket.pending_payload["description"], *ticket.pending_payload["notes"]])
    assert review.count("the card is closed") == 1
    assert (
        "**The refund failed after it was made:** The customer's bank refused the refund: the "
        "card is closed. No money reached the customer; it is back in the order's balance."
    ) in review
    assert "The charge was refused" not in review
    assert "No money moved" not in review


def test_the_queue_asks_the_refund_again_after_it_failed(
    transactional_db, client, manager, desk, woken
):
    ticket = failed_back(desk, client, woken, refunded(desk, "4312", manager))
    client.force_login(manager)

    page = client.get(reverse("reviews:queue")).content.decode()

    assert ticket.amount_cents == 699  # what the review asks, not the $0.00 paid since
    assert "Approve $6.99" in page
    assert "Approve $0.00" not in page
    assert "Refund failed after it was made: The customer&#x27;s bank refused the refund" in page
    assert "Charge failed" not in page


def test_what_is_left_after_a_failed_refund_counts_a_refund_made_outside_since(
    transactional_db, client, manager, desk, woken
):
    order = give_lines(make_order("4313", fee_cents=699), [("Ceramic vase", 2400, 2)])
    order.payment_reference = desk.payment_intent(order.paid_cents or 0)
    order.save(update_fields=["payment_reference"])
    ticket = services.ticket_open(order_number="4313")
    assert runner.advance(ticket.pk) == "awaiting_review"
    ticket.refresh_from_db()
    services.ticket_decide(
        ticket=ticket,
        interrupt_id=ticket.pending_interrupt_id,
        reviewer=manager,
        orders=services.review_answers(ticket, answer="approve"),
    )
    assert runner.advance(ticket.pk) == "refunded"
    # $10.00 refunded in Stripe's dashboard after the desk's refund; Stripe says so.
    outside = desk.refund_outside(order.payment_reference, 1000)
    deliver(client, woken, event("refund.created", desk.call("GET", f"/v1/refunds/{outside}")))

    ticket = failed_back(desk, client, woken, Ticket.objects.get(pk=ticket.pk))
    client.force_login(manager)

    [review] = ticket.pending_payload["orders"]
    assert policy.paid_left(review["order"]) == 5499 - 1000  # paid, less the outside refund
    page = client.get(reverse("reviews:ticket", args=[ticket.pk])).content.decode()
    assert "$38.00 left to refund of the $54.99 paid" in page  # after this $6.99 of shipping


def test_a_review_tells_a_refund_failed_later_from_a_charge_refused_by_its_trail():
    """The later of the two steps says which wrote the review's payment_error: a refund that
    failed, approved again and then refused at the charge reads as a refused charge."""
    assert failed_later({"trail": ["approve", "charge_order", "email", "refund_failed"]})
    assert not failed_later({"trail": ["refund_failed", "approve", "payment_failed"]})
    assert not failed_later({"trail": ["approve", "payment_failed"]})
    assert not failed_later({})


# --- a worker killed while it hands a failed refund back --------------------------------------
crash_plan = test_crash.crash_plan  # the crash tests' fixtures, shared
sweep_now = test_crash.sweep_now


@pytest.mark.slow
def test_a_worker_killed_handing_a_failed_refund_back_leaves_one_failure_email(
    workers, sinks, crash_plan, sweep_now, agent, admin_user, late_order
):
    """The event's handler recorded the failure (as Stripe said it); the worker that hands the
    ticket back is killed (os._exit) just before the failure email's SMTP conversation. The next
    worker, woken by the sweep, sends it once and brings the thread back to a manager."""
    env = crash_plan({})
    doomed = workers("doomed", pool="solo", env=env)
    ticket = test_crash.open_and_wait_for_review("1042", agent)
    test_crash.approve(ticket, admin_user)
    wait_for(lambda: test_crash.status(ticket) == "refunded", timeout=60, what="the refund")
    crash_plan({ticket.thread_id: {"point": "smtp:before", "times": 1}})
    Charge.objects.filter(ticket=ticket).update(
        processor_status="failed", failure_reason="expired_or_canceled_card"
    )
    enqueue.wake(ticket.pk)  # what the event's handler does once the failure commits
    wait_for(lambda: not doomed.alive, timeout=30, what="the worker to die before the email")
    assert test_crash.status(ticket) == "refunded"  # nothing handed back yet

    workers("second", pool="solo", env=env)

    def back() -> bool:
        if test_crash.status(ticket) == "awaiting_review":
            return True
        sweep_now()
        return False

    wait_for(back, timeout=60, every=0.5, what="the ticket back at a manager's review")
    ticket.refresh_from_db()
    assert ticket.required_role == "manager"
    assert money.refundable_cents(ticket.order) == ticket.order.shipping_fee_cents
    wait_for(lambda: sinks.smtp.count(f"{ticket.thread_id}:refund_failed:") == 1, what="the email")
    assert sinks.smtp.keys()[f"{ticket.thread_id}:email"] == 1  # never a second "refunded"
    assert sum(1 for d in sinks.smtp.delivered if ":refund_failed:" in d.key) == 1


@pytest.mark.slow
def test_a_worker_sigkilled_between_the_state_update_and_the_hand_back_mark_hands_back_once(
    workers, sinks, crash_plan, sweep_now, agent, admin_user, late_order
):
    """The worker handing the failed refund back wrote it into the thread (update_state on
    disk: the refund dropped, the failure noted, one more `refunds_failed`) and is stopped
    there and SIGKILLed (its whole process group) before it marks the charge handed back. The
    charge still reads "not handed back", so the next worker hands it back again: it must find
    the receipt gone from the thread's charges and only mark it, not write the failure into
    the thread a second time."""
    env = crash_plan({})
    doomed = workers("doomed", pool="solo", env=env)
    ticket = test_crash.open_and_wait_for_review("1042", agent)
    test_crash.approve(ticket, admin_user)
    wait_for(lambda: test_crash.status(ticket) == "refunded", timeout=60, what="the refund")
    point = "hand_back:state_written"
    crash_plan({ticket.thread_id: {"point": point, "times": 1, "action": "stop"}})
    Charge.objects.filter(ticket=ticket).update(
        processor_status="failed", failure_reason="expired_or_canceled_card"
    )
    enqueue.wake(ticket.pk)  # what the event's handler does once the failure commits
    wait_for(
        lambda: any(f"@{point}@" in marker for marker in fired(crash_plan.path)),
        timeout=30,
        what=f"the worker to stop at {point}",
    )
    doomed.kill()  # SIGKILL, where it stands
    assert Charge.objects.get(ticket=ticket).handed_back_at is None
    failure = "failed at Stripe; the money came back."
    assert persistence.snapshot(ticket.thread_id).values["notes"][-1].endswith(failure)

    workers("second", pool="solo", env=env)

    def back() -> bool:
        if test_crash.status(ticket) == "awaiting_review":
            return True
        sweep_now()
        return False

    wait_for(back, timeout=60, every=0.5, what="the ticket back at a manager's review")
    quiesce(workers)
    assert Charge.objects.get(ticket=ticket).handed_back_at is not None
    state = persistence.snapshot(ticket.thread_id).values
    assert state["checks"]["1042"]["refunds_failed"] == 1  # the next refund's key: ":again1"
    assert state["trail"].count("refund_failed") == 1
    ticket.refresh_from_db()
    assert sum(failure in note for note in ticket.pending_payload["notes"]) == 1
    assert AuditEvent.objects.filter(ticket=ticket, action="refund_failed").count() == 1
    assert sinks.smtp.count(f"{ticket.thread_id}:refund_failed:") == 1
    assert sinks.smtp.keys()[f"{ticket.thread_id}:email"] == 1


@pytest.mark.slow
def test_a_worker_killed_inside_the_event_handler_converges_on_the_failure(
    workers, localstripe, sinks, sweep_now, agent, admin_user, client, settings
):
    """A worker is SIGKILLed while its event handler re-reads the refund at Stripe (the read
    held at the proxy); the event, sent twice and an older one after, is handled by the next
    worker through the sweep: the ticket goes back to a manager once, one failure email."""
    settings.STRIPE_WEBHOOK_SECRET = WEBHOOK_SECRET
    settings.REFUNDS_SWEEP_GRACE_SECONDS = 0
    order = make_order("4303", fee_cents=699)
    order.payment_reference = localstripe.payment_intent(PAID)
    order.save(update_fields=["payment_reference"])
    proxy = StripeFaults(localstripe.url).start()
    env = localstripe.env() | {"STRIPE_API_BASE": proxy.url}
    doomed = workers("doomed", pool="solo", env=env)
    ticket = test_crash.open_and_wait_for_review("4303", agent)
    test_crash.approve(ticket, admin_user)
    wait_for(lambda: test_crash.status(ticket) == "refunded", timeout=60, what="the refund")
    [refund] = localstripe.refunds(order.payment_reference)
    proxy.says[refund["id"]] = {"status": "failed", "failure_reason": "expired_or_canceled_card"}
    proxy.hold()

    failed = event("refund.failed", refund)
    assert post(client, failed).status_code == 200
    wait_for(lambda: proxy.reads >= 1, timeout=30, what="the handler's re-read at Stripe")
    doomed.kill()  # SIGKILL, inside the event handler
    proxy.release()
    assert StripeEvent.objects.get(event_id=failed["id"]).handled_at is None
    assert post(client, failed).status_code == 200  # Stripe retries it
    assert post(client, event("refund.updated", refund | {"status": "pending"})).status_code == 200
    workers("second", pool="solo", env=env)

    def back() -> bool:
        if test_crash.status(ticket) == "awaiting_review":
            return True
        services.stripe_events_recover()
        sweep_now()
        return False

    wait_for(back, timeout=60, every=0.5, what="the ticket back at a manager's review")
    wait_for(
        lambda: not StripeEvent.objects.filter(handled_at__isnull=True).exists(),
        timeout=30,
        what="every event handled",
    )
    charge = Charge.objects.get(ticket=ticket)
    assert (charge.processor_status, charge.failure_reason) == (
        "failed",
        "expired_or_canceled_card",
    )
    assert money.refundable_cents(order) == 699
    wait_for(lambda: sinks.smtp.count(f"{ticket.thread_id}:refund_failed:") == 1, what="the email")
    assert sinks.smtp.keys()[f"{ticket.thread_id}:email"] == 1  # never a second "refunded"
    assert AuditEvent.objects.filter(ticket=ticket, action="refund_failed").count() == 1
    proxy.stop()
