"""Return, then refund, whatever dies (issue 49): real workers killed (SIGKILL, os._exit) or
stopped (SIGSTOP) around the return instructions, the warehouse's "received" and the refund of
what came back. Counted where it lands: refunds at localstripe (a Stripe emulator over HTTP that
ignores Idempotency-Key, so "once" is the ledger's and the lock's alone), emails at a real SMTP
server, the ledger's parts (restocked) in the database, one line of checkpoint history."""

from __future__ import annotations

import os
import signal
from datetime import timedelta

import pytest
from django.utils import timezone

from devtools.localstripe import SECRET_KEY
from devtools.processes import CeleryProcess
from refunds import payments, policy, services
from refunds.models import Charge, ChargePart, Decision, Order, OutsideRefund, ReturnRequest, Ticket
from refunds.services import Back
from tests import test_crash
from tests.conftest import give_lines, make_order, wait_for
from tests.quiescence import quiesce
from tests.reviewing import decide
from tests.test_ask_customer_crash import until
from tests.test_crash import _last_error, branch_points, fired_at, settle, status

pytestmark = pytest.mark.slow

crash_plan = test_crash.crash_plan  # the crash tests' fixtures, shared
sweep_now = test_crash.sweep_now

SHIRT, SCARF = ("Linen shirt", 2000, 3), ("Silk scarf", 1500, 1)
PAID = 3 * 2000 + 1500 + 500  # the goods and the $5.00 shipping fee
BACK = 2  # of the three shirts came back: $40.00


@pytest.fixture
def returns_on(settings, localstripe) -> dict[str, str]:
    """Wrong items are refunded on return, here (the decision's) and in the workers (their env);
    the workers refund at localstripe."""
    settings.REFUNDS_RETURN_REASONS = [policy.WRONG_ITEM]
    return localstripe.env() | {"REFUNDS_RETURN_REASONS": policy.WRONG_ITEM}


@pytest.fixture
def shirts(db, localstripe) -> Order:
    """Three shirts and a scarf, sent wrong, paid with a PaymentIntent of their own."""
    order = give_lines(make_order("2001", late=0, fee_cents=500), [SHIRT, SCARF])
    order.payment_reference = localstripe.payment_intent(order.paid_cents)
    order.save(update_fields=["payment_reference"])
    assert order.paid_cents == PAID
    return order


def approve_on_return(order: Order, opener, reviewer) -> Ticket:
    """A ticket for the wrong items, approved as the policy proposes: on their return."""
    ticket = services.ticket_open(
        order_number=order.number,
        opened_by=opener,
        reason=policy.WRONG_ITEM,
        note="Wrong size: the shirts and the scarf",
    )
    wait_for(lambda: status(ticket) == "awaiting_review", timeout=60, what="the review")
    ticket.refresh_from_db()
    decide(ticket, reviewer)
    return ticket


def waiting_for_goods(order: Order, opener, reviewer, sinks) -> tuple[Ticket, ReturnRequest]:
    """Approved on return, the customer told (at the SMTP server), the thread waiting."""
    ticket = approve_on_return(order, opener, reviewer)
    until(ticket, "awaiting_return")
    found = ReturnRequest.objects.get(ticket=ticket)
    told = return_email_key(ticket, found)
    wait_for(lambda: sinks.smtp.count(told), what="the return instructions at the SMTP server")
    return ticket, found


def return_email_key(ticket: Ticket, found: ReturnRequest) -> str:
    return f"{ticket.thread_id}:return:{found.decision_id}"


def shirts_back(order: Order, found: ReturnRequest) -> None:
    """The warehouse's word: two of the three shirts came back, nothing else."""
    shirt = order.lines.get(title=SHIRT[0])
    arrival = services.return_arrived(
        reference=found.reference,
        status="received",
        lines=[Back(quantity=BACK, line=shirt.pk)],
        source="warehouse",
    )
    assert arrival.outcome == "recorded"


def died_at_the_point(workers) -> CeleryProcess:
    """The one worker that died, of os._exit at the plan's point (not of anything else). A
    second worker starts while the first runs into its death, so either could have taken the
    run; the first, up and idle, takes it in practice, and this holds either way."""
    dead = wait_for(lambda: [w for w in workers if not w.alive], timeout=30, what="a worker to die")
    assert len(dead) == 1 and dead[0].proc.returncode == 1, [w.name for w in dead]
    return dead[0]


def assert_the_shirts_refunded_once(ticket, order, found, localstripe, sinks, point="") -> None:
    """One refund at Stripe for the two shirts, restocked once on the ledger, one "refunded"
    email beside the one return instructions (a second identical copy only in 6b's window)."""
    assert status(ticket) == "refunded"
    shirt = order.lines.get(title=SHIRT[0])
    (refund,) = localstripe.refunds(order.payment_reference)
    assert refund["amount"] == BACK * SHIRT[1]
    assert refund["metadata"]["parts"] == f"{shirt.pk}x{BACK}"
    (charge,) = Charge.objects.filter(ticket=ticket)
    assert (charge.status, charge.receipt) == ("succeeded", refund["id"])
    assert refund["metadata"]["refund_desk_key"] == charge.idempotency_key
    parts = ChargePart.objects.filter(charge__ticket=ticket)
    assert list(parts.values_list("line_id", "quantity", "amount_cents", "restock")) == [
        (shirt.pk, BACK, BACK * SHIRT[1], True)
    ]
    refunded = f"{ticket.thread_id}:email"
    wait_for(lambda: sinks.smtp.count(refunded), what="the refunded email")
    sent = sinks.smtp.keys()
    assert set(sent) == {return_email_key(ticket, found), refunded}
    assert sent[return_email_key(ticket, found)] == 1
    # "smtp:after" is the outbox's one window (the server took it, the sent mark did not
    # commit): a second identical copy is allowed there, and only there (DESIGN.md 6b).
    assert sent[refunded] == 1 or (point == "smtp:after" and sent[refunded] == 2)
    [received] = Decision.objects.filter(ticket=ticket, answer="received")
    assert received.applied_at is not None
    assert branch_points(ticket) == []


# --- 1. killed around the "received" resume and the refund that follows ------------------------
@pytest.mark.parametrize(
    "point",
    [
        "resume",  # the warehouse's word taken, the thread not resumed yet
        "await_return",  # the wait runs again from the top on resume
        "gateway:before:2001",  # its ledger row written, its lock held, Stripe not called
        "gateway:after:2001",  # Stripe refunded the shirts, the answer not recorded
        "smtp:before",  # the refund settled, the "refunded" email not begun
        "smtp:after",  # the server took the email, its sent mark not committed (6b)
    ],
)
def test_a_worker_killed_around_the_refund_of_what_came_back_refunds_it_once(
    workers,
    sinks,
    localstripe,
    crash_plan,
    sweep_now,
    returns_on,
    colleague,
    manager,
    shirts,
    point,
):
    """Two of three shirts came back; the worker resuming the thread with that word dies
    (os._exit) at `point`. The recovery sweep hands the thread to the other worker: one refund
    at Stripe of the two shirts, restocked once on the ledger, one "refunded" email."""
    env = returns_on | crash_plan({})
    workers("first", pool="solo", env=env)
    ticket, found = waiting_for_goods(shirts, colleague, manager, sinks)
    crash_plan({"*": {"point": point, "times": 1}})  # armed for the resume and what follows
    shirts_back(shirts, found)
    workers("second", pool="solo", env=env)  # it starts while the first runs into its death
    died_at_the_point(workers)
    moved = localstripe.refunds(shirts.payment_reference)
    assert len(moved) == (point in ("gateway:after:2001", "smtp:before", "smtp:after"))
    settle(ticket, sweep_now, timeout=60)
    quiesce(workers)
    assert_the_shirts_refunded_once(ticket, shirts, found, localstripe, sinks, point)


# --- 2. stopped past its lease inside the charge --------------------------------------------------
@pytest.mark.parametrize("point", ["gateway:before:2001", "gateway:after:2001"])
def test_a_worker_stopped_inside_the_refund_of_what_came_back_past_its_lease_refunds_once(
    workers,
    sinks,
    localstripe,
    crash_plan,
    sweep_now,
    returns_on,
    colleague,
    manager,
    shirts,
    point,
):
    """SIGSTOP at the gateway's door (or with Stripe's answer in hand), its effect lock held, for
    longer than the lease: a successor takes the thread over, finds the refund under way in
    another process and neither refunds nor mails meanwhile; the stopped process is woken
    (SIGCONT) and nothing is refunded or mailed twice."""
    env = returns_on | crash_plan({})
    workers("paused", env=env)
    ticket, found = waiting_for_goods(shirts, colleague, manager, sinks)
    crash_plan({"*": {"point": point, "times": 1, "action": "stop"}})
    shirts_back(shirts, found)
    marker = wait_for(lambda: fired_at(crash_plan.path, point), what="the worker to stop")[0]
    pid = int(marker.rsplit("@", 1)[1])
    moved = len(localstripe.refunds(shirts.payment_reference))
    assert moved == (point == "gateway:after:2001")
    wait_for(
        lambda: Ticket.objects.leasable().filter(pk=ticket.pk).exists(),
        what="the stopped process's lease to run out",
    )
    workers("successor", env=env)
    try:
        wait_for(
            lambda: (
                sweep_now() is not None
                and ("another process" in _last_error(ticket) or status(ticket) == "refunded")
            ),
            timeout=60,
            what="the successor to find the refund under way",
        )
        busy = "another process" in _last_error(ticket)
        while_stopped = len(localstripe.refunds(shirts.payment_reference))
        mailed_while_stopped = sinks.smtp.count(f"{ticket.thread_id}:email")
    finally:
        os.kill(pid, signal.SIGCONT)
    settle(ticket, sweep_now, timeout=90)
    quiesce(workers)  # the woken process finished its task: nothing it could still do
    # Counted first, where it lands; then how: the successor waited for the stopped charge.
    assert_the_shirts_refunded_once(ticket, shirts, found, localstripe, sinks)
    assert busy and (while_stopped, mailed_while_stopped) == (moved, 0)


# --- 3. a return and a refund made outside the desk --------------------------------------------
@pytest.fixture
def stripe_here(settings, localstripe, request):
    """This process's gateway is localstripe too: the reconcile runs here, as beat's task does."""
    settings.REFUNDS_GATEWAY = "refunds.payments.stripe.StripeGateway"
    settings.STRIPE_SECRET_KEY = SECRET_KEY
    settings.STRIPE_API_BASE = localstripe.url
    payments.get_gateway.cache_clear()  # one gateway per process, built from the settings
    request.addfinalizer(payments.get_gateway.cache_clear)
    return localstripe


OUTSIDE = 7000  # refunded in Stripe's dashboard while the goods travel: $10.00 of $80.00 is left


def refused_for_the_outside_refund(workers, localstripe, sinks, colleague, manager, order):
    """Approved on return ($75.00 of goods); while they travel, $70.00 of the $80.00 paid is
    refunded at Stripe outside the desk and the reconcile records it (as beat's task does).
    Everything comes back: the ticket, back with a manager, and its return."""
    ticket, found = waiting_for_goods(order, colleague, manager, sinks)
    localstripe.refund_outside(order.payment_reference, OUTSIDE)
    services.reconcile_payments(since=timezone.now() - timedelta(days=1))
    [outside] = OutsideRefund.objects.all()
    assert (outside.order_id, outside.amount_cents) == (order.pk, OUTSIDE)
    services.return_arrived(reference=found.reference, status="received", source="warehouse")
    until(ticket, "awaiting_review")
    quiesce(workers)
    ticket.refresh_from_db()
    return ticket, found


def test_a_return_and_a_refund_made_outside_never_refund_more_than_was_paid(
    workers, sinks, stripe_here, crash_plan, sweep_now, returns_on, colleague, manager, shirts
):
    """The $75.00 that came back is refused at the charge (more than the $10.00 left): no money
    moved, and a manager hears why, offered at most what is left."""
    workers("w1", pool="solo", env=returns_on | crash_plan({}))
    ticket, _ = refused_for_the_outside_refund(
        workers, stripe_here, sinks, colleague, manager, shirts
    )
    assert ticket.required_role == "manager"
    said = " ".join(ticket.pending_payload["description"].split())
    assert "$70.00 of the payment was refunded outside the desk" in said
    assert "No money moved" in said
    assert [r["amount"] for r in stripe_here.refunds(shirts.payment_reference)] == [OUTSIDE]
    assert not Charge.objects.filter(ticket=ticket, status="succeeded").exists()
    assert not ChargePart.objects.filter(charge__ticket=ticket, charge__status="succeeded")
    (review,) = ticket.pending_payload["orders"]
    assert review["amount_cents"] == PAID - OUTSIDE  # capped at what is left
    assert "Capped at the $10.00 left of the $80.00" in review["parts_why"]


def test_approving_what_is_left_after_the_goods_came_back_refunds_it_without_a_second_return(
    workers, sinks, stripe_here, crash_plan, sweep_now, returns_on, colleague, manager, shirts
):
    workers("w1", pool="solo", env=returns_on | crash_plan({}))
    ticket, found = refused_for_the_outside_refund(
        workers, stripe_here, sinks, colleague, manager, shirts
    )
    decide(ticket, manager)  # the $10.00 left, as proposed
    ends = ("refunded", "awaiting_return", "rejected", "failed")
    wait_for(
        lambda: sweep_now() is not None and status(ticket) in ends,
        timeout=60,
        what="the approval of what is left to be applied",
    )
    quiesce(workers)
    at_stripe = [r["amount"] for r in stripe_here.refunds(shirts.payment_reference)]
    assert sum(at_stripe) <= PAID  # holds either way
    assert ReturnRequest.objects.filter(ticket=ticket).count() == 1
    assert set(sinks.smtp.keys()) <= {return_email_key(ticket, found), f"{ticket.thread_id}:email"}
    assert status(ticket) == "refunded"
    assert sorted(at_stripe) == [PAID - OUTSIDE, OUTSIDE]


# --- 4. the return instructions -----------------------------------------------------------------
@pytest.mark.parametrize(
    "point",
    [
        "smtp:after",  # the server took the instructions, their sent mark not committed (6b)
        "after:ask_return",  # ask_return's checkpoint on disk, the wait not reached
    ],
)
def test_a_worker_killed_around_the_return_instructions_tells_the_customer_once_and_waits(
    workers, sinks, crash_plan, sweep_now, returns_on, colleague, manager, shirts, point
):
    """Killed after the server took the instructions (6b's window: a second identical copy
    allowed there) or once `ask_return`'s checkpoint was on disk: the next worker brings the
    thread to its wait for these goods (the warehouse's word on them is recorded and resumes
    it), the instructions sent once."""
    env = returns_on | crash_plan({"*": {"point": point, "times": 1}})
    workers("first", pool="solo", env=env)
    ticket = approve_on_return(shirts, colleague, manager)
    workers("second", pool="solo", env=env)
    died_at_the_point(workers)
    until(ticket, "awaiting_return")
    found = ReturnRequest.objects.get(ticket=ticket)
    told = return_email_key(ticket, found)
    wait_for(lambda: sinks.smtp.count(told), what="the return instructions")
    quiesce(workers)
    ticket.refresh_from_db()
    assert ticket.pending_payload["return_id"] == found.decision_id
    sent = sinks.smtp.keys()
    assert set(sent) == {told}
    assert sent[told] == 1 or (point == "smtp:after" and sent[told] == 2)
    assert found.reference in sinks.smtp.delivered[0].body
    assert branch_points(ticket) == []

    shirts_back(shirts, found)  # "recorded": the thread waits for exactly this return
