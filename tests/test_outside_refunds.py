"""Refunds made outside the desk (issue 30): a refund made straight at Stripe (its dashboard, the
shop's admin) is listed by the ledger before every charge, recorded once (OutsideRefund) and
counted against the order's balance by the locked read (refunds/money.py). Stripe is localstripe,
a real HTTP server; the outside refunds are made there with no desk key, as a dashboard makes
them. The same for the HTTP gateway at the fake processor."""

from __future__ import annotations

from datetime import UTC, datetime

import pytest

from devtools.localstripe import SECRET_KEY, StripeFaults
from refunds import lease as leases
from refunds import money, payments, runner, services
from refunds.flow.errors import OverBalance, RetryableGatewayError
from refunds.models import Charge, Order, OutsideRefund, Ticket
from refunds.payments import DemoGateway, HttpGateway, ProcessorRefund
from refunds.payments.stripe import StripeGateway
from refunds.statuses import ProcessorStatus
from tests import test_crash
from tests.conftest import make_order, wait_for

PAID = 5699  # goods and the $6.99 shipping fee

_numbers = iter(range(5000, 6000))


def gateway(base: str, *, timeout: float = 2.0) -> StripeGateway:
    return StripeGateway(secret_key=SECRET_KEY, api_base=base, timeout=timeout)


def paid_order(reference: str, *, paid: int | None = None) -> Order:
    """An order whose payment is `reference`; `paid`: what the shop says the customer paid
    (None: it sent no amount, so only the shipping fee is refundable)."""
    order = make_order(str(next(_numbers)), fee_cents=699)
    order.payment_reference = reference
    if paid is not None:
        order.total_cents = order.paid_cents = paid
    order.save()
    return order


def pay(gw, order: Order, amount: int) -> str:
    """money.pay as the order's ticket's run does it, holding its lease: each amount under a key
    of its own, as a manager's lower approval gets."""
    ticket = Ticket.objects.filter(order=order).first() or Ticket.objects.create(
        thread_id=f"refund-{order.number}", order=order
    )
    lease = _leases.get(ticket.pk) or leases.grant(ticket)
    assert lease is not None
    _leases[ticket.pk] = lease
    return money.pay(
        gateway=gw,
        ticket_id=ticket.pk,
        order_id=order.pk,
        lease=lease,
        key=f"{ticket.thread_id}:charge_card:{order.number}:{amount}",
        amount_cents=amount,
    )


_leases: dict[int, leases.Lease] = {}  # the runs of this test


@pytest.fixture(autouse=True)
def _one_run_per_ticket():
    _leases.clear()


def at_stripe(localstripe, order: Order) -> list[tuple[int, bool]]:
    """(amount, made by the desk) of every refund of the order's payment at localstripe."""
    return [
        (r["amount"], StripeGateway.METADATA_KEY in (r.get("metadata") or {}))
        for r in localstripe.refunds(order.payment_reference)
    ]


# --- the balance check before every charge ----------------------------------------------------
def test_a_fee_refunded_in_stripes_dashboard_is_not_refunded_again(db, localstripe):
    order = paid_order(localstripe.payment_intent(PAID))
    made = localstripe.refund_outside(order.payment_reference, 699)

    with pytest.raises(OverBalance) as refused:
        pay(gateway(localstripe.url), order, 699)

    said = str(refused.value)
    assert f"order {order.number} has $0.00 left to refund of the $6.99 the desk may" in said
    assert "$6.99 of the payment was refunded outside the desk" in said
    assert f"the last on {datetime.now(UTC):%b} " in said
    assert at_stripe(localstripe, order) == [(699, False)]  # only the dashboard's
    [outside] = OutsideRefund.objects.all()
    assert (outside.processor_id, outside.order, outside.amount_cents) == (made, order, 699)
    assert outside.status == "succeeded"
    assert not Charge.objects.exists()  # refused before any row: nothing under way


def test_the_desk_may_refund_only_what_an_outside_refund_left(db, localstripe):
    order = paid_order(localstripe.payment_intent(PAID))
    localstripe.refund_outside(order.payment_reference, 300)
    gw = gateway(localstripe.url)

    with pytest.raises(OverBalance, match=r"has \$3\.99 left to refund"):
        pay(gw, order, 699)
    pay(gw, order, 399)  # a manager approves what is left

    assert sorted(at_stripe(localstripe, order)) == [(300, False), (399, True)]
    assert OutsideRefund.objects.count() == 1  # listed twice, recorded once
    with pytest.raises(OverBalance, match=r"has \$0\.00 left"):
        pay(gw, order, 1)


def test_with_the_amount_paid_known_outside_refunds_count_against_it(db, localstripe):
    order = paid_order(localstripe.payment_intent(PAID), paid=PAID)
    localstripe.refund_outside(order.payment_reference, 5000)
    gw = gateway(localstripe.url)

    pay(gw, order, 600)  # $56.99 paid, $50.00 given back at Stripe: $6.99 is left

    localstripe.refund_outside(order.payment_reference, 50)
    with pytest.raises(OverBalance) as refused:
        pay(gw, order, 99)
    assert "has $0.49 left to refund of the $56.99 the customer paid" in str(refused.value)
    assert "$50.50 of the payment was refunded outside the desk" in str(refused.value)


def test_the_desks_own_refunds_are_not_counted_twice(db, localstripe):
    order = paid_order(localstripe.payment_intent(PAID))
    gw = gateway(localstripe.url)
    pay(gw, order, 300)

    pay(gw, order, 399)  # lists the $3.00 refund: the desk's own, by its key

    assert not OutsideRefund.objects.exists()
    assert sorted(at_stripe(localstripe, order)) == [(300, True), (399, True)]


def test_a_second_refund_under_the_key_of_a_paid_row_counts_against_the_balance(db, localstripe):
    """A refund carrying the key of a row the desk paid that is not the row's own (its receipt is
    another refund): money moved beside the desk's, and the next charge counts it."""
    order = paid_order(localstripe.payment_intent(PAID), paid=PAID)
    gw = gateway(localstripe.url)
    pay(gw, order, 300)
    localstripe.call(
        "POST",
        "/v1/refunds",
        payment_intent=order.payment_reference,
        amount="5400",
        **{f"metadata[{StripeGateway.METADATA_KEY}]": Charge.objects.get().idempotency_key},
    )

    with pytest.raises(OverBalance, match=r"has \$0\.00 left to refund of the \$56\.99"):
        pay(gw, order, 399)

    assert OutsideRefund.objects.get().amount_cents == 5400


def test_a_refund_with_a_desk_key_no_ledger_row_has_counts_as_outside(db):
    """Another desk on the same Stripe account, say: the key is not ours to vouch for."""
    order = paid_order("pi_Another")
    listed = [ProcessorRefund(id="re_1", amount_cents=699, status="succeeded", desk_key="x:1")]

    assert money.outside_refunds_record(order.pk, listed) == 1

    assert OutsideRefund.objects.get().processor_id == "re_1"


@pytest.mark.parametrize("status", ["failed", "canceled"])
def test_an_outside_refund_the_processor_failed_or_canceled_does_not_count(db, status):
    order = paid_order("pi_Failed")
    failed = ProcessorRefund(id="re_f", amount_cents=699, status=status, desk_key="")
    money.outside_refunds_record(order.pk, [failed])

    assert pay(DemoGateway(), order, 699)  # the money came back: the fee is refundable

    assert OutsideRefund.objects.get().status == status


def test_an_outside_refunds_status_only_moves_forward(db):
    order = paid_order("pi_Later")
    said = {"id": "re_l", "amount_cents": 699, "desk_key": ""}
    money.outside_refunds_record(order.pk, [ProcessorRefund(status="failed", **said)])

    money.outside_refunds_record(order.pk, [ProcessorRefund(status="pending", **said)])  # older

    assert OutsideRefund.objects.get().status == "failed"
    money.outside_refunds_record(order.pk, [ProcessorRefund(status="surprise", **said)])
    assert OutsideRefund.objects.get().status == "failed"


def test_an_outside_refund_holds_its_balance_unless_the_processor_gave_it_back(db):
    order = paid_order("pi_Twins")
    money.outside_refunds_record(
        order.pk,
        [
            ProcessorRefund(id=f"re_{n}", amount_cents=1, status=status, desk_key="")
            for n, status in enumerate(ProcessorStatus.values)
        ],
    )

    assert sorted(OutsideRefund.objects.holding_balance().values_list("status", flat=True)) == [
        "",
        "pending",
        "requires_action",
        "succeeded",
    ]


def test_a_status_the_desk_does_not_know_holds_the_balance(db):
    order = paid_order("pi_Unknown")
    strange = ProcessorRefund(id="re_u", amount_cents=699, status="surprise", desk_key="")
    money.outside_refunds_record(order.pk, [strange])

    with pytest.raises(OverBalance, match="refunded outside the desk"):
        pay(DemoGateway(), order, 699)


class ListedBeforeTheDashboard(StripeGateway):
    """The listing answers before a refund is made in the dashboard; reconcile (or another
    ticket's lookup) records that refund before this charge takes the order's lock."""

    order: Order

    def payment_refunds(self, payment_reference: str) -> list[ProcessorRefund]:
        listed = super().payment_refunds(payment_reference)
        made = ProcessorRefund(id="re_meanwhile", amount_cents=699, status="", desk_key="")
        money.outside_refunds_record(self.order.pk, [made])  # as another process would
        return listed


def test_the_locked_read_counts_what_another_process_recorded_after_this_listing(db, localstripe):
    """The late guard: the decision is the locked read of the table, not this call's listing."""
    order = paid_order(localstripe.payment_intent(PAID))
    gw = ListedBeforeTheDashboard(secret_key=SECRET_KEY, api_base=localstripe.url)
    gw.order = order

    with pytest.raises(OverBalance, match="refunded outside the desk"):
        pay(gw, order, 699)
    assert localstripe.refunds(order.payment_reference) == []


def test_a_charge_with_its_key_paid_lists_nothing(db, localstripe):
    """A repeated call answers the first receipt; the balance was checked when it was made."""
    order = paid_order(localstripe.payment_intent(PAID))
    faults = StripeFaults(localstripe.url).start()
    try:
        gw = gateway(faults.url)
        receipt = pay(gw, order, 699)
        lists = faults.lists
        faults.go_down()  # a lookup now would fail

        assert pay(gw, order, 699) == receipt
    finally:
        faults.stop()
    assert lists == 1


def test_stripe_unreachable_for_the_listing_is_retryable_and_refunds_nothing(db, localstripe):
    order = paid_order(localstripe.payment_intent(PAID))
    faults = StripeFaults(localstripe.url).start()
    faults.go_down()

    with pytest.raises(RetryableGatewayError):
        pay(gateway(faults.url), order, 699)

    assert localstripe.refunds(order.payment_reference) == []
    assert not Charge.objects.exists()


def test_an_order_with_no_payment_reference_lists_nothing(db, localstripe):
    order = paid_order("")

    assert pay(DemoGateway(), order, 699)
    assert not OutsideRefund.objects.exists()


# --- the other gateways ------------------------------------------------------------------------
def test_the_http_gateway_counts_a_refund_made_at_the_processor(db, sinks):
    order = paid_order("pay_1042")
    gw = HttpGateway(base_url=sinks.gateway.url)
    sinks.gateway.refund_outside("pay_1042", 400)

    with pytest.raises(OverBalance, match=r"\$2\.99 left.*\$4\.00 of the payment was refunded"):
        pay(gw, order, 699)
    pay(gw, order, 299)

    assert OutsideRefund.objects.get().amount_cents == 400
    assert sorted(r.amount_cents for r in gw.payment_refunds("pay_1042")) == [299, 400]


def test_the_demo_processor_lists_the_desks_own_refunds_of_a_payment(db):
    order = paid_order("pi_Demo")
    receipt = pay(DemoGateway(), order, 699)

    [listed] = DemoGateway().payment_refunds("pi_Demo")

    assert (listed.id, listed.amount_cents, listed.status) == (receipt, 699, "succeeded")
    assert DemoGateway().payment_refunds("") == []
    assert not OutsideRefund.objects.exists()


# --- through the graph: a manager hears why ---------------------------------------------------
@pytest.fixture
def stripe_here(settings, localstripe, request):
    settings.REFUNDS_GATEWAY = "refunds.payments.stripe.StripeGateway"
    settings.STRIPE_SECRET_KEY = SECRET_KEY
    settings.STRIPE_API_BASE = localstripe.url
    payments.get_gateway.cache_clear()  # one gateway per process, built from the settings
    request.addfinalizer(payments.get_gateway.cache_clear)
    return localstripe


def test_a_ticket_whose_balance_went_elsewhere_goes_to_a_manager_saying_why(
    transactional_db, stripe_here, manager
):
    order = paid_order(stripe_here.payment_intent(PAID))
    ticket = services.ticket_open(order_number=order.number)
    assert runner.advance(ticket.pk) == "awaiting_review"
    ticket.refresh_from_db()
    stripe_here.refund_outside(order.payment_reference, 699)  # meanwhile, in the dashboard

    services.ticket_decide(
        ticket=ticket,
        interrupt_id=ticket.pending_interrupt_id,
        reviewer=manager,
        orders=services.review_answers(ticket, answer="approve"),
    )
    assert runner.advance(ticket.pk) == "awaiting_review"

    ticket.refresh_from_db()
    assert ticket.required_role == "manager"
    said = " ".join(ticket.pending_payload["description"].split())
    assert "$6.99 of the payment was refunded outside the desk" in said
    assert "No money moved" in said
    assert at_stripe(stripe_here, order) == [(699, False)]


def test_after_a_refund_made_outside_the_review_proposes_what_is_left_and_approving_it_pays_it(
    transactional_db, stripe_here, agent, manager
):
    """$71.23 paid for a lamp and its shipping; while the review waits, $60.00 is refunded in
    Stripe's dashboard. The approved $64.24 is refused at the charge, and the review comes back
    over the order as it stands: proposing the $11.23 left (not the $64.24 again, in a loop),
    saying so; approving it refunds $11.23 at Stripe, never past what was paid."""
    from refunds import policy
    from tests.conftest import give_lines

    order = paid_order(stripe_here.payment_intent(7123))
    give_lines(order, [("Desk lamp", 6424, 1)])
    ticket = services.ticket_open(
        order_number=order.number,
        opened_by=agent,
        reason=policy.DAMAGED,
        note="the lamp arrived cracked",
    )
    assert runner.advance(ticket.pk) == "awaiting_review"
    ticket.refresh_from_db()
    assert ticket.amount_cents == 6424
    stripe_here.refund_outside(order.payment_reference, 6000)  # meanwhile, in the dashboard

    def approve_as_proposed() -> None:
        ticket.refresh_from_db()
        services.ticket_decide(
            ticket=ticket,
            interrupt_id=ticket.pending_interrupt_id,
            reviewer=manager,
            orders=services.review_answers(ticket, answer="approve"),
        )

    approve_as_proposed()
    assert runner.advance(ticket.pk) == "awaiting_review"
    ticket.refresh_from_db()
    (line,) = ticket.pending_payload["orders"]
    assert line["amount_cents"] == ticket.amount_cents == 1123
    assert line["order"]["outside_refunded_cents"] == 6000
    assert "Capped at the $11.23 left of the $71.23 the customer paid" in line["parts_why"]
    said = " ".join(ticket.pending_payload["description"].split())
    assert "**Refund $11.23**" in said and "No money moved" in said

    approve_as_proposed()
    assert runner.advance(ticket.pk) == "refunded"
    assert sorted(at_stripe(stripe_here, order)) == [(1123, True), (6000, False)]


# --- a worker killed inside the pre-charge lookup ---------------------------------------------
crash_plan = test_crash.crash_plan  # the crash tests' fixtures, shared
sweep_now = test_crash.sweep_now


@pytest.mark.slow
def test_a_worker_killed_inside_the_pre_charge_lookup_refunds_once_at_stripe(
    workers, localstripe, crash_plan, sweep_now, agent, admin_user
):
    """$50.00 of the $56.99 paid was refunded in Stripe's dashboard. A worker is SIGKILLed while
    the ledger lists the payment's refunds before the charge (the listing held at a proxy in
    front of localstripe); the next worker lists again, records the dashboard's refund once,
    finds the $6.99 fee still within what was paid, and refunds it once."""
    order = paid_order(localstripe.payment_intent(PAID), paid=PAID)
    localstripe.refund_outside(order.payment_reference, 5000)
    proxy = StripeFaults(localstripe.url).start()
    env = localstripe.env() | {"STRIPE_API_BASE": proxy.url} | crash_plan({})
    doomed = workers("doomed", pool="solo", env=env)
    ticket = test_crash.open_and_wait_for_review(order.number, agent)
    proxy.hold_lists()

    test_crash.approve(ticket, admin_user)
    wait_for(lambda: proxy.lists >= 1, timeout=30, what="the pre-charge lookup at Stripe")
    doomed.kill()  # SIGKILL, its listing unanswered
    proxy.release()
    assert at_stripe(localstripe, order) == [(5000, False)]  # the desk made nothing yet

    workers("second", pool="solo", env=env)
    test_crash.settle(ticket, sweep_now, timeout=90)

    assert test_crash.status(ticket) == "refunded"
    assert sorted(at_stripe(localstripe, order)) == [(699, True), (5000, False)]
    [charge] = Charge.objects.filter(ticket=ticket)
    assert (charge.amount_cents, charge.status) == (699, "succeeded")
    [outside] = OutsideRefund.objects.all()
    assert (outside.order, outside.amount_cents) == (order, 5000)
    assert proxy.lists >= 2  # listed again by the worker that finished it
    proxy.stop()


def test_an_admin_sees_an_orders_outside_refunds_on_its_page(db, admin_client):
    order = paid_order("pi_Shown")
    made = datetime(2026, 12, 3, 15, 0, tzinfo=UTC)
    dashboard = ProcessorRefund(
        id="re_Dashboard", amount_cents=1200, status="succeeded", desk_key="", made_at=made
    )
    money.outside_refunds_record(order.pk, [dashboard])

    page = admin_client.get(f"/admin/refunds/order/{order.pk}/change/")

    assert page.status_code == 200
    text = page.content.decode()
    assert "Refunds made outside the desk" in text
    assert "re_Dashboard" in text and "$12.00" in text


def test_a_review_proposes_and_allows_only_what_outside_refunds_left_of_the_payment(db):
    """$50.00 of a $120.00 payment refunded in Stripe's dashboard: the order's facts carry it,
    the proposal for an empty box is capped at the $70.00 left, the reviewer's parts form says
    so, and parts above it are refused in words that count it."""
    from refunds import policy
    from refunds.models import OrderLine

    order = paid_order("pi_outside_lines", paid=12000)
    OrderLine.objects.create(
        order=order, line_id="L1", title="Ceramic vase", unit_price_cents=5650, quantity=2
    )
    OutsideRefund.objects.create(
        order=order, processor_id="re_dash", amount_cents=5000, status="succeeded"
    )
    OutsideRefund.objects.create(  # given back by the processor: it does not count
        order=order, processor_id="re_failed", amount_cents=3000, status="failed"
    )

    facts = order.facts()
    assert facts is not None and facts["outside_refunded_cents"] == 5000
    parts, why = policy.proposed_parts(
        policy.NOT_RECEIVED, facts, "the box was empty", late_by_days=0
    )
    assert sum(p["amount_cents"] for p in parts) == 7000
    assert "Capped at the $70.00 left of the $120.00 the customer paid" in why
    assert policy.parts_left(facts, parts) == 0
    [line] = facts["lines"]
    with pytest.raises(ValueError, match=r"\$70.00 is left of the \$120.00 the customer paid"):
        policy.parts_checked(facts, [{"line": line["id"], "quantity": 2}])
