"""Refunds through StripeGateway with real workers, counted at localstripe (a stateful Stripe
emulator run as a real HTTP server): the shipping fee only, once per order across tickets, and
once when a worker is killed inside charge_card before or after the request left, and once
through an outage that the charge's retries ride out.

localstripe ignores Idempotency-Key (tests/test_payments_stripe.py documents it), so "once" here
is kept by our ledger and the gateway's lookup alone, not by Stripe's idempotency."""

from __future__ import annotations

import json
import time

import pytest
from django.contrib.auth.models import Group, Permission, User

from devtools.faults import calls, fired
from devtools.localstripe import StripeFaults
from refunds import persistence, selectors, services
from refunds.models import Charge, Decision, Order, StripeEvent, Ticket
from tests import test_crash
from tests.conftest import make_order, wait_for
from tests.quiescence import quiesce
from tests.test_api_orders import client_for
from tests.test_crash import (
    _last_error,
    approve,
    branch_points,
    open_and_wait_for_review,
    settle,
    status,
)
from tests.test_stripe_events import WEBHOOK_SECRET, event, post

pytestmark = pytest.mark.slow

crash_plan = test_crash.crash_plan  # the crash tests' fixtures, shared
sweep_now = test_crash.sweep_now

PAID = 5699  # what the customer paid: goods and the $6.99 shipping fee


@pytest.fixture
def paid_order(db, localstripe) -> Order:
    order = make_order("1042", fee_cents=699)
    order.payment_reference = localstripe.payment_intent(PAID)
    order.save(update_fields=["payment_reference"])
    return order


def refunded_at_stripe(localstripe, order: Order) -> list[int]:
    return [r["amount"] for r in localstripe.refunds(order.payment_reference)]


def test_an_approved_ticket_refunds_the_shipping_fee_at_stripe(
    workers, localstripe, sinks, agent, admin_user, paid_order
):
    workers("w1", env=localstripe.env())
    ticket = open_and_wait_for_review("1042", agent)

    approve(ticket, admin_user)
    wait_for(lambda: status(ticket) == "refunded", timeout=60, what="the refund")

    [refund] = localstripe.refunds(paid_order.payment_reference)
    assert refund["amount"] == 699  # the fee, not the $56.99 paid
    assert refund["metadata"]["refund_desk_key"] == f"{ticket.thread_id}:charge_card:1042:699"
    assert Charge.objects.get(ticket=ticket).receipt == refund["id"]
    assert sinks.gateway.refunds_for("") == []  # nothing went to the other processor
    wait_for(lambda: sinks.smtp.count(ticket.thread_id), what="the confirmation email")


def test_a_signed_event_is_handled_by_a_worker_that_re_reads_the_refund_at_stripe(
    workers, localstripe, sinks, agent, admin_user, paid_order, client, settings
):
    """Stripe answers the refund `pending` (the proxy says so of it: localstripe cannot): the
    ledger records it, the desk says the refund is on its way, the customer is told it has
    started. Then Stripe holds `succeeded`; an event whose payload still says pending is handled
    by a worker that re-reads the refund: "Refunded", and no second email."""
    settings.STRIPE_WEBHOOK_SECRET = WEBHOOK_SECRET
    proxy = StripeFaults(localstripe.url).start()
    proxy.creating = {"status": "pending"}
    workers("w1", env=localstripe.env() | {"STRIPE_API_BASE": proxy.url})
    ticket = open_and_wait_for_review("1042", agent)
    approve(ticket, admin_user)
    wait_for(lambda: status(ticket) == "refunded", timeout=60, what="the refund")
    [refund] = localstripe.refunds(paid_order.payment_reference)
    assert Charge.objects.get(ticket=ticket).processor_status == "pending"
    assert selectors.refund_progress(Ticket.objects.get(pk=ticket.pk)) == {
        "state": "on_its_way",
        "words": "Refund of $6.99 started, on its way to the customer's bank",
    }
    wait_for(lambda: sinks.smtp.count(ticket.thread_id), what="the first email")
    [first] = sinks.smtp.delivered
    assert "We have started a refund of $6.99" in first.body
    assert "5 to 10 business days" in " ".join(first.body.split())

    del proxy.says[refund["id"]]  # Stripe holds succeeded now
    # Its payload says pending; localstripe holds succeeded, which the worker reads.
    response = post(client, event("refund.created", refund | {"status": "pending"}))

    assert response.status_code == 200
    wait_for(
        lambda: StripeEvent.objects.filter(handled_at__isnull=False).exists(),
        timeout=30,
        what="a worker to handle the event",
    )
    assert Charge.objects.get(ticket=ticket).processor_status == "succeeded"
    assert selectors.refund_progress(Ticket.objects.get(pk=ticket.pk)) == {
        "state": "refunded",
        "words": "Refunded",
    }
    assert sinks.smtp.keys() == {f"{ticket.thread_id}:email": 1}  # no second email
    proxy.stop()


def test_several_tickets_for_one_order_refund_it_once_at_stripe(
    workers, localstripe, agent, admin_user, paid_order
):
    """A manager lowers the first refund to $3.00; the second ticket is offered what is left,
    $3.99; a third is declined: the order is refunded in full. Two refunds at Stripe, $6.99."""
    workers("w1", env=localstripe.env())
    first = open_and_wait_for_review("1042", agent)
    services.ticket_decide(
        ticket=first,
        interrupt_id=first.pending_interrupt_id,
        reviewer=admin_user,
        orders=services.review_answers(first, answer="approve", amount_cents=300),
    )
    wait_for(lambda: status(first) == "refunded", timeout=60, what="the first refund")

    second = open_and_wait_for_review("1042", agent)
    assert second.amount_cents == 399
    approve(second, admin_user)
    wait_for(lambda: status(second) == "refunded", timeout=60, what="the second refund")

    third = services.ticket_open(order_number="1042", opened_by=agent)
    wait_for(lambda: status(third) == "declined", timeout=60, what="the decline")
    assert sorted(refunded_at_stripe(localstripe, paid_order)) == [300, 399]


def test_a_payment_stripe_refuses_goes_back_to_a_manager_with_no_money_moved(
    workers, localstripe, agent, admin_user, db
):
    order = make_order("1042")
    order.payment_reference = "pi_NoSuchPaymentAtStripe"
    order.save(update_fields=["payment_reference"])
    workers("w1", env=localstripe.env())
    ticket = open_and_wait_for_review("1042", agent)

    approve(ticket, admin_user)

    def back_for_review():
        ticket.refresh_from_db()
        return ticket.status == "awaiting_review" and ticket.required_role == "manager"

    wait_for(back_for_review, timeout=60, what="the ticket back with a manager")
    assert "Stripe refused" in ticket.pending_payload["description"]
    assert "No money moved" in ticket.pending_payload["description"]
    assert Charge.objects.get(ticket=ticket).status == Charge.Status.REFUSED


@pytest.mark.parametrize("point", ["gateway:before", "gateway:after"])
def test_a_worker_killed_inside_charge_card_refunds_once_at_stripe(
    workers, localstripe, sinks, crash_plan, sweep_now, agent, admin_user, paid_order, point
):
    first = workers("first", pool="solo", env=localstripe.env())
    ticket = open_and_wait_for_review("1042", agent)
    env = localstripe.env() | crash_plan({ticket.thread_id: {"point": point, "times": 1}})
    first.stop()
    doomed = workers("doomed", pool="solo", env=env)
    approve(ticket, admin_user)
    wait_for(lambda: not doomed.alive, timeout=30, what="the worker to die around the charge")
    assert doomed.proc.returncode == 1 and fired(crash_plan.path)
    # Before: the request never left. After: Stripe refunded and the answer died with the worker.
    assert len(refunded_at_stripe(localstripe, paid_order)) == (point == "gateway:after")

    workers("second", pool="solo", env=env)  # a brand-new process on the same thread
    settle(ticket, sweep_now, timeout=60)

    assert status(ticket) == "refunded"
    [refund] = localstripe.refunds(paid_order.payment_reference)
    assert refund["amount"] == 699
    assert Charge.objects.get(ticket=ticket).receipt == refund["id"]
    wait_for(lambda: sinks.smtp.count(ticket.thread_id), what="the confirmation email")
    assert sinks.smtp.keys() == {f"{ticket.thread_id}:email": 1}
    assert branch_points(ticket) == []


# --- Stripe down for a while: the charge's retries (REFUNDS_CHARGE_RETRY_SECONDS) -----------------
OUTAGE = 5.0  # seconds Stripe stays unreachable after the first charge meets it


@pytest.fixture
def stripe_proxy(localstripe):
    """Stripe as the workers see it, through a loopback proxy that can go down."""
    proxy = StripeFaults(localstripe.url).start()
    yield proxy
    proxy.stop()


def trail(ticket: Ticket) -> list[str]:
    return persistence.snapshot(ticket.thread_id).values["trail"]


def gateway_calls(plan) -> int:
    return sum(1 for *_, kind, event in calls(plan) if (kind, event) == ("gateway", "start"))


def test_a_stripe_outage_of_a_few_seconds_is_ridden_out_and_refunds_once(
    workers, localstripe, stripe_proxy, sinks, agent, admin_user, paid_order, crash_plan
):
    # A lease of 6 s is renewed every 2 s and counts as lost after 4 s without a renewal: the
    # retries outlast that, so a refund under the epoch of the run that met the outage shows
    # the lease was renewed while they slept.
    env = localstripe.env() | {"STRIPE_API_BASE": stripe_proxy.url, "REFUNDS_LEASE_SECONDS": "6"}
    env |= crash_plan({})  # no crash: the plan's call log shows each call made to the gateway
    workers("w1", env=env)
    ticket = open_and_wait_for_review("1042", agent)
    stripe_proxy.go_down()
    approve(ticket, admin_user)
    # Met first by the ledger's listing of the payment's refunds, before any row is written.
    wait_for(lambda: gateway_calls(crash_plan.path) >= 2, what="the charge to meet it, twice")
    time.sleep(OUTAGE)  # the outage goes on while the retries back off
    stripe_proxy.come_back()

    wait_for(lambda: status(ticket) == "refunded", timeout=60, what="the refund")
    assert refunded_at_stripe(localstripe, paid_order) == [699]
    key = f"{ticket.thread_id}:charge_card:1042:699"
    assert stripe_proxy.idempotency_keys == [key]  # the one request that reached Stripe
    charge = Charge.objects.get(ticket=ticket)
    assert (charge.idempotency_key, charge.status) == (key, Charge.Status.SUCCEEDED)
    # One run, one lease: no takeover, no second run, and no manager asked to approve again.
    assert charge.epoch == ticket.lease_epoch + 1
    assert Ticket.objects.get(pk=ticket.pk).lease_epoch == ticket.lease_epoch + 1
    assert Decision.objects.filter(ticket=ticket).count() == 1
    assert "payment_failed" not in trail(ticket)
    wait_for(lambda: sinks.smtp.count(ticket.thread_id), what="the confirmation email")


def test_an_outage_longer_than_the_retry_budget_goes_to_a_manager_with_no_money_moved(
    workers, localstripe, stripe_proxy, agent, admin_user, manager, paid_order
):
    env = localstripe.env() | {
        "STRIPE_API_BASE": stripe_proxy.url,
        "REFUNDS_CHARGE_RETRY_SECONDS": "2",
    }
    workers("w1", env=env)
    ticket = open_and_wait_for_review("1042", agent)
    stripe_proxy.go_down()
    approve(ticket, admin_user)

    def back_for_review() -> bool:
        ticket.refresh_from_db()
        return ticket.status == "awaiting_review" and ticket.required_role == "manager"

    wait_for(back_for_review, timeout=60, what="the ticket back with a manager")
    description = ticket.pending_payload["description"]
    assert "the gateway stayed unavailable (Stripe unreachable" in description
    assert "No money moved" in description
    assert refunded_at_stripe(localstripe, paid_order) == []

    stripe_proxy.come_back()
    approve(ticket, manager)
    wait_for(lambda: status(ticket) == "refunded", timeout=60, what="the refund")
    assert refunded_at_stripe(localstripe, paid_order) == [699]


def test_a_lease_lost_during_the_retries_stops_them_before_the_next_gateway_call(
    workers, localstripe, stripe_proxy, crash_plan, agent, admin_user, paid_order
):
    # Stripe answers every refund with a rate limit (retryable, and counted at the proxy); a
    # renewal then fails, so the lease counts as lost: the fence in the ledger and the run's
    # drain stop the retries, and the budget (a minute here) is not waited out.
    env = localstripe.env() | {
        "STRIPE_API_BASE": stripe_proxy.url,
        "REFUNDS_CHARGE_RETRY_SECONDS": "60",
    }
    workers("w1", env=env | crash_plan({}))
    ticket = open_and_wait_for_review("1042", agent)
    stripe_proxy.queue(*["rate_limited"] * 1000)
    approve(ticket, admin_user)
    wait_for(lambda: stripe_proxy.refund_posts >= 2, timeout=30, what="the retries")
    crash_plan({"*": [{"point": "renew", "times": 1, "action": "error"}]})

    wait_for(lambda: "lease lost" in _last_error(ticket), timeout=20, what="the run to stop")
    posts = stripe_proxy.refund_posts
    quiesce(workers, needing=[ticket.pk])
    assert stripe_proxy.refund_posts == posts
    assert refunded_at_stripe(localstripe, paid_order) == []
    assert status(ticket) != "awaiting_review"  # not sent back to a person


def test_a_push_moving_a_reviewed_order_to_another_payment_is_refused_and_the_first_is_refunded(
    workers, localstripe, agent, admin_user, paid_order
):
    other_payment = localstripe.payment_intent(PAID)
    shop = User.objects.create_user("shop")
    group = Group.objects.get_or_create(name="Shop integrations")[0]  # a flush takes it
    group.permissions.add(
        Permission.objects.get(codename="push_orders", content_type__app_label="refunds")
    )
    shop.groups.add(group)
    workers("w1", env=localstripe.env())
    ticket = open_and_wait_for_review("1042", agent)

    line = {
        "order_number": "1042",
        "customer_name": paid_order.customer_name,
        "customer_email": paid_order.customer_email,
        "currency": "USD",
        "shipping_fee": "6.99",
        "promised_on": paid_order.promised_on.isoformat(),
        "delivered_on": paid_order.delivered_on.isoformat(),
        "payment_reference": other_payment,
    }
    answer = client_for(shop).post(
        "/api/orders/", json.dumps({"orders": [line]}), content_type="application/json"
    )
    assert answer.json()["results"][0]["result"] == "refused"

    approve(ticket, admin_user)
    wait_for(lambda: status(ticket) == "refunded", timeout=60, what="the refund")
    assert refunded_at_stripe(localstripe, paid_order) == [699]
    assert localstripe.refunds(other_payment) == []
