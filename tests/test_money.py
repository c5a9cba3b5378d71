"""The ledger around any gateway (refunds/money.py): once per key, never past the order's
balance, only while the run's epoch holds, and an unknown outcome resolved by a lookup. Counted
at a real HTTP processor, not only in our rows."""

from __future__ import annotations

import threading
import time

import pytest
from django.db import connection, transaction
from django.db.models import F
from langgraph.errors import GraphDrained

from core import sql
from devtools.fake_processor import FakeProcessor
from refunds import lease as leases
from refunds import money
from refunds.flow.errors import (
    EffectBusy,
    OverBalance,
    PaymentOutcomeUnknown,
    PermanentGatewayError,
)
from refunds.flow.nodes.charge import charge_key
from refunds.models import Charge, ChargePart, Order, OrderLine, Ticket
from refunds.payments import HttpGateway
from refunds.selectors import refunded_by_line
from tests.conftest import (
    free_elsewhere,
    held_elsewhere,
    in_another_session,
    make_order,
    wait_for,
)


@pytest.fixture
def processor():
    server = FakeProcessor(answer_late_by=0.6).start()
    yield server
    server.stop()


@pytest.fixture
def ticket(db, late_order) -> Ticket:
    return Ticket.objects.create(thread_id="refund-1042-m", order=late_order)


def held(ticket: Ticket) -> leases.Lease:
    lease = leases.grant(ticket)
    assert lease is not None
    return lease


def pay(processor, ticket, lease, *, amount=699, key=None, timeout=0.3, parts=None) -> str:
    if parts is not None:
        amount = sum(p["amount_cents"] for p in parts)
    return money.pay(
        gateway=HttpGateway(processor.url, timeout=timeout),
        ticket_id=ticket.pk,
        order_id=ticket.order_id,
        lease=lease,
        key=key
        or (
            f"{ticket.thread_id}:charge_card:{amount}"
            if parts is None
            else charge_key(ticket.thread_id, ticket.order.number, amount, parts)
        ),
        amount_cents=amount,
        parts=parts,
    )


def test_a_charge_is_recorded_paid_and_a_repeat_does_not_call_the_gateway(processor, ticket):
    lease = held(ticket)
    receipt = pay(processor, ticket, lease)
    assert pay(processor, ticket, lease) == receipt
    charge = Charge.objects.get()
    assert (charge.status, charge.receipt, charge.epoch) == ("succeeded", receipt, lease.epoch)
    assert sum(processor.charge_calls.values()) == 1


def test_a_ticket_deleted_under_its_run_is_not_charged(processor, ticket):
    lease = held(ticket)
    Ticket.objects.filter(pk=ticket.pk).delete()  # an admin's delete while the worker runs
    with pytest.raises(GraphDrained, match="no longer exists"):
        pay(processor, ticket, lease)
    assert processor.charge_calls == {} and Charge.objects.count() == 0


def test_a_charge_past_the_orders_balance_is_refused_before_the_gateway(processor, ticket):
    with pytest.raises(OverBalance, match=r"\$6.99 left to refund of its \$6.99 fee"):
        pay(processor, ticket, held(ticket), amount=700)
    assert processor.charge_calls == {} and Charge.objects.count() == 0


def test_an_earlier_ticket_of_the_order_uses_up_its_balance(processor, late_order):
    first = Ticket.objects.create(thread_id="refund-1042-a", order=late_order)
    pay(processor, first, held(first), amount=500)
    Ticket.objects.filter(pk=first.pk).update(status="refunded")
    second = Ticket.objects.create(thread_id="refund-1042-b", order=late_order)
    lease = held(second)
    with pytest.raises(OverBalance, match=r"\$1.99 left"):
        pay(processor, second, lease, amount=699)
    assert pay(processor, second, lease, amount=199)
    assert late_order.refunded_cents() == 699


def test_a_worker_whose_epoch_was_taken_over_never_calls_the_gateway(processor, ticket):
    lease = held(ticket)
    Ticket.objects.filter(pk=ticket.pk).update(lease_epoch=F("lease_epoch") + 1)  # a successor
    with pytest.raises(GraphDrained, match="no longer holds"):
        pay(processor, ticket, lease)
    assert processor.charge_calls == {} and Charge.objects.count() == 0


def test_a_process_that_stalled_past_its_lease_stops_before_the_gateway(processor, ticket):
    lease = held(ticket)
    lease.confirmed_at = time.monotonic() - lease.seconds  # what a long SIGSTOP looks like
    with pytest.raises(GraphDrained, match="stalled"):
        pay(processor, ticket, lease)
    assert processor.charge_calls == {}


def test_a_lost_answer_after_the_money_moved_is_found_by_lookup_not_charged_again(
    processor, ticket
):
    processor.queue("timeout_after")
    receipt = pay(processor, ticket, held(ticket))
    assert receipt == processor.refunds[f"{ticket.thread_id}:charge_card:699"]["receipt"]
    assert sum(processor.charge_calls.values()) == 1 and sum(processor.lookup_calls.values()) == 1
    assert Charge.objects.get().status == "succeeded"


def test_an_unknown_outcome_whose_lookup_fails_stays_pending_until_a_lookup_answers(
    processor, ticket, monkeypatch
):
    processor.queue("reset_after")
    monkeypatch.setattr(HttpGateway, "lookup", lambda self, key: (_ for _ in ()).throw(OSError()))
    with pytest.raises(PaymentOutcomeUnknown):
        pay(processor, ticket, held(ticket))
    assert Charge.objects.get().status == "pending"  # money may have moved: it holds the balance
    assert money.money_moved(ticket) is not None
    monkeypatch.undo()

    Ticket.objects.filter(pk=ticket.pk).update(lease_expires_at=None)  # the next run
    receipt = pay(processor, ticket, held(ticket))

    assert sum(processor.charge_calls.values()) == 1  # looked up, not charged again
    assert Charge.objects.get().receipt == receipt


def test_a_decline_frees_the_balance_and_a_later_approval_tries_again(processor, ticket):
    processor.queue("decline")
    lease = held(ticket)
    with pytest.raises(PermanentGatewayError):
        pay(processor, ticket, lease)
    assert Charge.objects.get().status == "refused" and money.money_moved(ticket) is None
    assert pay(processor, ticket, lease)
    assert Charge.objects.get().status == "succeeded"


def test_a_charge_another_process_is_making_is_left_to_it(processor, transactional_db, late_order):
    ticket = Ticket.objects.create(thread_id="refund-1042-m", order=late_order)
    key = f"{ticket.thread_id}:charge_card:699"
    with held_elsewhere(key):
        with pytest.raises(EffectBusy):
            pay(processor, ticket, held(ticket))
    assert processor.charge_calls == {} and Charge.objects.count() == 0


def test_a_second_order_is_its_own_balance(processor, db):
    order = make_order("5000", fee_cents=300)
    ticket = Ticket.objects.create(thread_id="refund-5000-x", order=order)
    assert pay(processor, ticket, held(ticket), amount=300)
    assert money.refundable_cents(order) == 0


def _way_out(path: str, processor, ticket: Ticket) -> None:
    lease = held(ticket)
    if path == "paid, then paid again":
        pay(processor, ticket, lease)
        pay(processor, ticket, lease)
    elif path == "declined":
        processor.queue("decline")
        with pytest.raises(PermanentGatewayError):
            pay(processor, ticket, lease)
    elif path == "over the balance":
        with pytest.raises(OverBalance):
            pay(processor, ticket, lease, amount=700)
    elif path == "epoch taken over":
        Ticket.objects.filter(pk=ticket.pk).update(lease_epoch=F("lease_epoch") + 1)
        with pytest.raises(GraphDrained):
            pay(processor, ticket, lease)
    elif path == "ticket deleted":
        Ticket.objects.filter(pk=ticket.pk).delete()
        with pytest.raises(GraphDrained):
            pay(processor, ticket, lease)
    elif path == "answer lost, found by lookup":
        processor.queue("timeout_after")
        pay(processor, ticket, lease)


@pytest.mark.parametrize(
    "path",
    [
        "paid, then paid again",
        "declined",
        "over the balance",
        "epoch taken over",
        "ticket deleted",
        "answer lost, found by lookup",
    ],
)
def test_every_way_out_of_a_charge_gives_its_effect_lock_back(processor, ticket, path):
    """A way out that kept the lock would leave the key busy for every other worker until this
    connection closes (workers keep theirs across tasks)."""
    _way_out(path, processor, ticket)
    assert free_elsewhere(f"{ticket.thread_id}:charge_card:699")
    assert free_elsewhere(f"{ticket.thread_id}:charge_card:700")


def test_a_charge_that_waited_on_its_order_row_takes_its_effect_lock_once(
    processor, transactional_db, late_order
):
    """PostgreSQL re-checks a row that changed while the reserve waited for its lock; the effect
    lock, taken before by a statement of its own, is taken once, so one release gives it back."""
    if connection.vendor != "postgresql":
        pytest.skip("row locks and their re-check are PostgreSQL's")
    ticket = Ticket.objects.create(thread_id="refund-1042-m", order=late_order)
    lease = held(ticket)
    updated = threading.Event()

    def update_the_order_and_hold_it() -> None:
        with transaction.atomic():
            Order.objects.filter(pk=late_order.pk).update(customer_name=F("customer_name"))
            updated.set()
            wait_for(
                lambda: sql.fetchone(
                    "SELECT 1 FROM pg_stat_activity WHERE wait_event_type = 'Lock' "
                    "AND datname = current_database()",
                    [],
                ),
                timeout=10,
                every=0.02,
                what="the reserve to wait on the order row",
            )

    other = in_another_session(update_the_order_and_hold_it)
    assert updated.wait(10)
    try:
        receipt = pay(processor, ticket, lease)
    finally:
        other.join(15)
    assert receipt and Charge.objects.get().status == "succeeded"
    assert free_elsewhere(f"{ticket.thread_id}:charge_card:699")


def paid_less(order: Order, paid_cents: int) -> Order:
    """The shop says the customer paid less than the fee (a discount code, a gift card)."""
    Order.objects.filter(pk=order.pk).update(total_cents=paid_cents, paid_cents=paid_cents)
    order.refresh_from_db()
    return order


def test_a_charge_past_what_the_customer_paid_is_refused_before_the_gateway(processor, ticket):
    paid_less(ticket.order, 500)
    lease = held(ticket)
    with pytest.raises(OverBalance, match=r"\$5.00 left to refund of the \$5.00 the customer paid"):
        pay(processor, ticket, lease, amount=699)
    assert processor.charge_calls == {} and Charge.objects.count() == 0
    assert pay(processor, ticket, lease, amount=500)


def test_two_tickets_charging_one_order_at_once_never_refund_more_than_was_paid(
    processor, transactional_db, late_order
):
    """The late guard where the race is: each ticket's own check would allow $3.00 of the $5.00
    paid; the ledger's reserve, with the order locked, lets one through. On PostgreSQL another
    session holds the order row until both reserves wait on it, so both start before either
    wrote: the one that gets the lock second must still see the first one's charge."""
    paid_less(late_order, 500)
    outcomes = race(processor, late_order, amount=300)
    assert sorted(outcomes) == ["paid", "refused"]
    assert sum(processor.charge_calls.values()) == 1
    assert late_order.refunded_cents() == 300


def race(processor, late_order: Order, **charged) -> list[str]:
    """Two tickets of one order charge it at once, each with `charged` (pay's amount or parts);
    what each got. On PostgreSQL another session holds the order row until both reserves wait
    on it, so both start before either wrote."""
    # One open ticket per order: the first is closed (an admin's fork of it runs again), the
    # second one is new.
    first = Ticket.objects.create(thread_id="refund-1042-a", order=late_order)
    leases_ = [held(first)]
    Ticket.objects.filter(pk=first.pk).update(status="rejected")
    tickets = [first, Ticket.objects.create(thread_id="refund-1042-b", order=late_order)]
    leases_.append(held(tickets[1]))
    outcomes: list[str] = []

    def charge(n: int) -> None:
        start.wait()
        try:
            pay(processor, tickets[n], leases_[n], timeout=3, **charged)
            outcomes.append("paid")
        except OverBalance:
            outcomes.append("refused")
        finally:
            connection.close()

    def hold_the_order_until_both_wait() -> None:
        with transaction.atomic():
            sql.execute("SELECT 1 FROM refunds_order WHERE id = %s FOR UPDATE", [late_order.pk])
            start.wait()
            # Inside a transaction pg_stat_activity is read once and kept: clear it each time.
            wait_for(
                lambda: (
                    sql.execute("SELECT pg_stat_clear_snapshot()", []) is not None
                    and sql.fetchone(
                        "SELECT count(*) >= 2 FROM pg_stat_activity WHERE wait_event_type = 'Lock' "
                        "AND datname = current_database()",
                        [],
                    )[0]
                ),
                timeout=10,
                every=0.02,
                what="both reserves to wait on the order row",
            )

    postgres = connection.vendor == "postgresql"
    start = threading.Barrier(3 if postgres else 2)
    threads = [threading.Thread(target=charge, args=(n,)) for n in range(2)]
    if postgres:
        threads.append(in_another_session(hold_the_order_until_both_wait))
    for t in threads[:2]:
        t.start()
    for t in threads:
        t.join(timeout=30)
    return outcomes


# --- parts: lines of the order, its shipping fee -----------------------------------------------
def vases(order: Order, *, bought: int = 2, tax_cents: int = 0) -> OrderLine:
    return OrderLine.objects.create(
        order=order,
        line_id="L1",
        sku="VASE-CER",
        title="Ceramic vase",
        unit_price_cents=2400,
        quantity=bought,
        tax_cents=tax_cents,
    )


def test_a_refund_of_lines_and_shipping_is_recorded_part_by_part_with_its_charge(processor, ticket):
    line = vases(ticket.order)
    parts = [
        {"line": line.pk, "quantity": 1, "amount_cents": 2400, "restock": True},
        {"shipping": True, "amount_cents": 699},
    ]
    assert pay(processor, ticket, held(ticket), parts=parts)
    charge = Charge.objects.get()
    assert charge.amount_cents == 3099
    recorded = sorted(
        ChargePart.objects.filter(charge=charge).values_list(
            "line_id", "quantity", "amount_cents", "restock"
        ),
        key=lambda r: r[0] or 0,
    )
    assert recorded == [(None, 0, 699, False), (line.pk, 1, 2400, True)]
    assert refunded_by_line([line.pk]) == {line.pk: (1, 2400)}
    assert sum(processor.charge_calls.values()) == 1


def test_a_refund_with_no_parts_named_is_the_shipping_fee(processor, ticket):
    """One path: an amount alone is a refund of one part, the shipping fee."""
    pay(processor, ticket, held(ticket), amount=500)
    assert list(ChargePart.objects.values_list("line_id", "quantity", "amount_cents")) == [
        (None, 0, 500)
    ]


@pytest.mark.parametrize(
    ("part", "why"),
    [
        ({"quantity": 3, "amount_cents": 100}, r"2 of 2 x Ceramic vase left to refund; 3 is more"),
        ({"quantity": 0, "amount_cents": 0}, r"0 is more"),
        ({"quantity": 1, "amount_cents": 2401}, r"1 x Ceramic vase can be refunded up to \$24.00"),
    ],
)
def test_a_line_refunded_past_what_was_bought_is_refused_before_the_gateway(
    processor, ticket, part, why
):
    line = vases(ticket.order)
    with pytest.raises(OverBalance, match=why):
        pay(processor, ticket, held(ticket), parts=[{"line": line.pk, **part}])
    assert processor.charge_calls == {} and Charge.objects.count() == 0
    assert ChargePart.objects.count() == 0


def test_a_lines_tax_is_refundable_with_it_in_shares(processor, ticket):
    line = vases(ticket.order, bought=2, tax_cents=401)  # 200.5 a vase: the first share rounds up
    lease = held(ticket)

    def vase(cents: int) -> list:
        return [{"line": line.pk, "quantity": 1, "amount_cents": cents}]

    with pytest.raises(OverBalance, match=r"up to \$26.01"):
        pay(
            processor, ticket, lease, parts=[{"line": line.pk, "quantity": 1, "amount_cents": 2602}]
        )
    pay(processor, ticket, lease, parts=[{"line": line.pk, "quantity": 1, "amount_cents": 2601}])
    with pytest.raises(OverBalance, match=r"up to \$26.00"):
        pay(processor, ticket, lease, parts=vase(2601), key="second vase")
    pay(processor, ticket, lease, parts=vase(2600))
    assert refunded_by_line([line.pk]) == {line.pk: (2, 5201)}  # 2 x $24.00 and the $4.01 tax


def test_a_line_of_another_order_or_a_part_given_twice_is_refused(processor, ticket):
    other = vases(make_order("2001"))
    line = vases(ticket.order)
    lease = held(ticket)
    with pytest.raises(OverBalance, match="order 1042 has no line"):
        pay(processor, ticket, lease, parts=[{"line": other.pk, "quantity": 1, "amount_cents": 1}])
    twice = [{"line": line.pk, "quantity": 1, "amount_cents": 1}] * 2
    with pytest.raises(OverBalance, match="given twice"):
        pay(processor, ticket, lease, parts=twice)
    assert processor.charge_calls == {} and Charge.objects.count() == 0


def test_lines_and_shipping_together_never_pass_what_the_customer_paid(processor, ticket):
    line = vases(ticket.order)
    paid_less(ticket.order, 4000)  # a discount: $48.00 of vases and $6.99 shipping, $40.00 paid
    lease = held(ticket)

    def vase(cents: int) -> list:
        return [{"line": line.pk, "quantity": 1, "amount_cents": cents}]

    pay(processor, ticket, lease, parts=[{"line": line.pk, "quantity": 1, "amount_cents": 2400}])
    with pytest.raises(OverBalance, match=r"\$16.00 left to refund of the \$40.00"):
        pay(processor, ticket, lease, parts=vase(2400), key="second vase")
    pay(processor, ticket, lease, parts=[{"shipping": True, "amount_cents": 699}])
    assert ticket.order.refunded_cents() == 3099


def test_the_same_amount_for_other_parts_is_a_charge_of_its_own(processor, ticket):
    """After a refusal, a manager refunds the lamp instead of the vase for the same amount: the
    key differs, so the ledger's row and the processor's key never carry the vase's parts."""
    order = ticket.order
    vase = vases(order)
    lamp = OrderLine.objects.create(
        order=order, line_id="L2", title="Desk lamp", unit_price_cents=2400, quantity=1
    )
    as_vase = [{"line": vase.pk, "quantity": 1, "amount_cents": 2400}]
    as_lamp = [{"line": lamp.pk, "quantity": 1, "amount_cents": 2400}]
    assert charge_key("t", "1042", 2400, as_vase) != charge_key("t", "1042", 2400, as_lamp)
    # The shipping fee alone keeps the key a thread from before parts may have charged with.
    assert charge_key("t", "1042", 699, [{"shipping": True, "amount_cents": 699}]) == (
        "t:charge_card:1042:699"
    )
    lease = held(ticket)
    processor.queue("decline")
    with pytest.raises(PermanentGatewayError):
        pay(processor, ticket, lease, parts=as_vase)
    pay(processor, ticket, lease, parts=as_lamp)
    assert refunded_by_line([vase.pk, lamp.pk]) == {lamp.pk: (1, 2400)}


def test_two_tickets_racing_for_the_last_unit_of_a_line_refund_it_once(
    processor, transactional_db, late_order
):
    """The per-line guard where the race is: each asks for the one vase left, at a partial
    amount so that the line's money would allow both; the reserve, with the order locked, lets
    one through."""
    line = vases(late_order, bought=1)
    outcomes = race(
        processor, late_order, parts=[{"line": line.pk, "quantity": 1, "amount_cents": 1000}]
    )
    assert sorted(outcomes) == ["paid", "refused"]
    assert sum(processor.charge_calls.values()) == 1
    assert refunded_by_line([line.pk]) == {line.pk: (1, 1000)}
