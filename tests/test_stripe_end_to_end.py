"""Refunds through StripeGateway with real workers, counted at localstripe (a stateful Stripe
emulator run as a real HTTP server): the shipping fee only, once per order across tickets, and
once when a worker is killed inside charge_card before or after the request left.

localstripe ignores Idempotency-Key (tests/test_stripe_gateway.py documents it), so "once" here
is kept by our ledger and the gateway's lookup alone, not by Stripe's idempotency."""

from __future__ import annotations

import json

import pytest
from django.contrib.auth.models import Group, User

from devtools.faults import fired
from refunds import services
from refunds.models import Charge, Order
from tests import test_crash
from tests.conftest import make_order, wait_for
from tests.test_api_orders import client_for
from tests.test_crash import approve, branch_points, open_and_wait_for_review, settle, status

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
    assert refund["metadata"]["refund_desk_key"] == f"{ticket.thread_id}:charge_card:699"
    assert Charge.objects.get(ticket=ticket).receipt == refund["id"]
    assert sinks.gateway.refunds_for("") == []  # nothing went to the other processor
    wait_for(lambda: sinks.smtp.count(ticket.thread_id), what="the confirmation email")


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
        answer="approve",
        reviewer=admin_user,
        amount_cents=300,
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
    assert "Stripe refused the refund" in ticket.pending_payload["description"]
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


def test_a_push_moving_a_reviewed_order_to_another_payment_is_refused_and_the_first_is_refunded(
    workers, localstripe, agent, admin_user, paid_order
):
    other_payment = localstripe.payment_intent(PAID)
    shop = User.objects.create_user("shop")
    shop.groups.add(Group.objects.get(name="Shop integrations"))
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
