"""A ticket of several orders refunding parts (units of lines, one order with its shipping fee),
its worker stopped (SIGSTOP) inside the first order's charge at the gateway for longer than its
lease: a second worker takes the thread over and charges the other orders, the first is left to
the stopped one, which wakes (SIGCONT) and changes nothing more. Counted at localstripe (a
stateful Stripe emulator over HTTP, which ignores Idempotency-Key, so "once" is the ledger's and
the lock's alone): one refund per order for the sum of its parts, never more than was bought of
a line nor paid for an order, and the ledger's units per line the same (issue 29)."""

from __future__ import annotations

import os
import signal
from collections import Counter

import pytest

from refunds import policy, services
from refunds.models import Charge, ChargePart, Decision, Order, Ticket
from tests import test_crash
from tests.conftest import give_lines, make_order, wait_for
from tests.quiescence import quiesce
from tests.test_crash import (
    _last_error,
    branch_points,
    fired_at,
    hold_the_others,
    status,
)

pytestmark = pytest.mark.slow

crash_plan = test_crash.crash_plan  # the crash tests' fixtures, shared
sweep_now = test_crash.sweep_now

# What each order holds (title, unit price, units bought), its fee, and what is refunded of it:
# units of its lines by title, and "shipping" for its fee.
BOUGHT = {
    "1042": ([("Ceramic vase", 2400, 2), ("Linen table runner", 2450, 1)], 699),
    "1044": ([("Desk lamp", 3900, 1), ("Lamp bulb", 450, 4)], 500),
    "1047": ([("USB-C charger", 2999, 1), ("Laptop sleeve", 1999, 1)], 0),
}
REFUNDED = {
    "1042": {"Ceramic vase": 2, "shipping": 1},  # both vases and the fee: $54.99
    "1044": {"Lamp bulb": 3},  # three bulbs of four: $13.50
    "1047": {"USB-C charger": 1},  # $29.99
}
FIRST, SECOND, THIRD = BOUGHT


@pytest.fixture
def paid_orders(db, localstripe) -> dict[str, Order]:
    """The three orders of one customer, each paid with a PaymentIntent of its own."""
    orders = {}
    for number, (lines, fee) in BOUGHT.items():
        order = give_lines(make_order(number, fee_cents=fee, name="Iris Vale"), lines)
        order.payment_reference = localstripe.payment_intent(order.paid_cents)
        order.save(update_fields=["payment_reference"])
        orders[number] = order
    return orders


def parts_of(order: Order) -> list[dict]:
    titles = {line.title: line.pk for line in order.lines.all()}
    return [
        {"shipping": True} if what == "shipping" else {"line": titles[what], "quantity": units}
        for what, units in REFUNDED[order.number].items()
    ]


def parts_sum(order: Order) -> int:
    prices = {line.title: line.unit_price_cents for line in order.lines.all()}
    return sum(
        order.shipping_fee_cents if what == "shipping" else prices[what] * units
        for what, units in REFUNDED[order.number].items()
    )


def refunds_at_stripe(localstripe, orders: dict[str, Order]) -> dict[str, list[dict]]:
    return {n: localstripe.refunds(o.payment_reference) for n, o in orders.items()}


@pytest.mark.parametrize(
    "point",
    [
        f"gateway:before:{FIRST}",  # at the gateway's door, its ledger row written, its lock held
        f"gateway:after:{FIRST}",  # Stripe refunded it, the answer not recorded, its lock held
    ],
)
def test_a_worker_stopped_inside_a_charge_of_parts_past_its_lease_refunds_each_order_once(
    workers, localstripe, sinks, crash_plan, sweep_now, agent, manager, paid_orders, point
):
    first = workers("first", env=localstripe.env())
    ticket = services.ticket_open(
        order_numbers=list(BOUGHT),
        opened_by=agent,
        reason=policy.DAMAGED,
        note="Customer: the vases, the bulbs and the charger arrived broken",
    )
    wait_for(lambda: status(ticket) == "awaiting_review", timeout=60, what="the review")
    ticket.refresh_from_db()
    stop = {"point": point, "times": 1, "action": "stop"}
    env = localstripe.env() | crash_plan(
        {ticket.thread_id: [stop, *hold_the_others(SECOND, THIRD, seconds=5)]}
    )
    first.stop()
    workers("paused", env=env)
    services.ticket_decide(
        ticket=ticket,
        interrupt_id=ticket.pending_interrupt_id,
        reviewer=manager,
        orders=services.review_answers(
            ticket,
            answer="approve",
            orders={n: {"answer": "approve", "parts": parts_of(o)} for n, o in paid_orders.items()},
        ),
    )
    marker = wait_for(lambda: fired_at(crash_plan.path, point), what="the worker to stop")[0]
    pid = int(marker.rsplit("@", 1)[1])
    moved = len(localstripe.refunds(paid_orders[FIRST].payment_reference))
    assert moved == (1 if point.startswith("gateway:after") else 0)
    wait_for(
        lambda: Ticket.objects.leasable().filter(pk=ticket.pk).exists(),
        what="the stopped process's lease to run out",
    )
    workers("successor", env=env)
    try:
        # The stopped process holds the first order's effect lock: its successor charges the
        # other two and waits for that one, mailing nothing meanwhile.
        wait_for(
            lambda: sweep_now() is not None and "another process" in _last_error(ticket),
            timeout=60,
            what="the successor to find the first charge under way",
        )
        wait_for(
            lambda: all(
                localstripe.refunds(paid_orders[n].payment_reference) for n in (SECOND, THIRD)
            ),
            timeout=60,
            what="the successor to refund the other two",
        )
        # Whatever the first order's own money did, it stays with the stopped process.
        assert len(localstripe.refunds(paid_orders[FIRST].payment_reference)) == moved
        assert sinks.smtp.count(ticket.thread_id) == 0
    finally:
        os.kill(pid, signal.SIGCONT)
    test_crash.settle(ticket, sweep_now, timeout=90)
    quiesce(workers)  # the woken process finished its task: nothing it could still do

    assert status(ticket) == "refunded"
    at_stripe = refunds_at_stripe(localstripe, paid_orders)
    for number, order in paid_orders.items():
        (refund,) = at_stripe[number]  # one refund per order, however many runs tried
        assert refund["amount"] == parts_sum(order) <= order.paid_cents
        charge = Charge.objects.get(ticket=ticket, order=order)
        assert (charge.status, charge.receipt) == ("succeeded", refund["id"])
        assert refund["metadata"]["refund_desk_key"] == charge.idempotency_key
        # What Stripe was told it gives back, line by line, never more than was bought.
        said = Counter()
        for part in refund["metadata"]["parts"].split(","):
            what, _, units = part.partition("x")
            said[what] += int(units or 0)
        bought = {str(line.pk): line.quantity for line in order.lines.all()}
        assert all(units <= bought[line] for line, units in said.items() if line != "shipping")
        assert said == {
            str(line["line"]) if "line" in line else "shipping": line.get("quantity", 0)
            for line in parts_of(order)
        }
    # The ledger holds the same units of each line, and each order's parts come to its refund.
    ledger = Counter()
    for line, units in ChargePart.objects.filter(
        charge__ticket=ticket, line__isnull=False
    ).values_list("line__title", "quantity"):
        ledger[line] += units
    assert ledger == {
        title: units for r in REFUNDED.values() for title, units in r.items() if title != "shipping"
    }
    assert Charge.objects.filter(ticket=ticket).count() == len(BOUGHT)
    wait_for(lambda: sinks.smtp.count(ticket.thread_id), what="the confirmation email")
    assert sinks.smtp.keys() == {f"{ticket.thread_id}:email": 1}
    assert Decision.objects.get(ticket=ticket).applied_at is not None
    assert branch_points(ticket) == []
