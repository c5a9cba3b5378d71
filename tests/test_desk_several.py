"""The desk's answers for a ticket of several orders (issue 18): per-order decisions through
refunds.services.ticket_decide, checked against the pending review before anything is recorded,
then carried through the real graph in this process (runner.advance). Money is counted in the
ledger and at the demo processor, mail in the outbox."""

from __future__ import annotations

import pytest
from django.core.exceptions import PermissionDenied

from refunds import enqueue, runner, services
from refunds.models import (
    AuditEvent,
    Charge,
    Decision,
    Email,
    Ticket,
)
from refunds.payments.demo import DemoProcessorRefund
from tests.conftest import make_order
from tests.reviewing import shipped


@pytest.fixture(autouse=True)
def _no_broker(monkeypatch):
    monkeypatch.setattr(enqueue, "wake", lambda ticket_id: True)  # the test advances itself


def several(*orders: tuple[str, int, int], opened_by=None) -> Ticket:
    """A ticket of these orders (number, days late, fee in cents) of one customer, run in this
    process up to its review."""
    for number, late, fee in orders:
        make_order(number, late=late, fee_cents=fee, name="Iris Lund")
    ticket = services.ticket_open(order_numbers=[o[0] for o in orders], opened_by=opened_by)
    assert runner.advance(ticket.pk) == "awaiting_review"
    return Ticket.objects.get(pk=ticket.pk)


def agents_ticket(opened_by=None) -> Ticket:
    """1042 $6.99 and 1044 $12.50, both late; 1043 on time (declined by policy): $19.49 for an
    agent."""
    return several(("1042", 4, 699), ("1044", 3, 1250), ("1043", -1, 499), opened_by=opened_by)


def managers_ticket() -> Ticket:
    """1045 $48.00 late and 1042 $6.99 late: a manager's review."""
    return several(("1045", 6, 4800), ("1042", 4, 699))


def decide(ticket: Ticket, reviewer, answer="approve", note="", **shorthands) -> Decision:
    return services.ticket_decide(
        ticket=ticket,
        interrupt_id=ticket.pending_interrupt_id,
        orders=services.review_answers(ticket, answer=answer, **shorthands),
        reviewer=reviewer,
        note=note,
    )


def test_the_review_lists_each_order_and_asks_the_open_ones_total(transactional_db, agent):
    ticket = agents_ticket()
    lines = {o["number"]: o for o in ticket.pending_payload["orders"]}
    assert {n: o["status"] for n, o in lines.items()} == {
        "1042": "open",
        "1044": "open",
        "1043": "declined",
    }
    assert ticket.amount_cents == 1949 and ticket.required_role == "agent"
    assert ticket.order_numbers() == ["1042", "1044", "1043"]


def test_an_agent_approves_one_order_and_rejects_the_other_with_the_shared_reason(
    transactional_db, agent, colleague
):
    ticket = agents_ticket(opened_by=agent)
    decision = decide(
        ticket,
        colleague,
        reason="The tracking shows 1044 on time.",
        orders={"1042": {"answer": "approve"}, "1044": {"answer": "reject"}},
    )
    assert decision.answer == "approve"
    assert decision.orders == {
        "1042": shipped(699),
        "1044": {"answer": "reject", "reason": "The tracking shows 1044 on time."},
    }
    # Logged as itself, with what it pays: not "Approved" (nor "Edited the amount").
    event = AuditEvent.objects.get(ticket=ticket, action="answer")
    assert event.answer["orders"] == decision.orders and event.amount_cents == 699
    assert not AuditEvent.objects.filter(ticket=ticket, action__in=["approve", "edit"]).exists()

    assert runner.advance(ticket.pk) == "refunded"
    charge = Charge.objects.get(ticket=ticket)
    assert (charge.order.number, charge.amount_cents, charge.status) == ("1042", 699, "succeeded")
    assert [r.amount_cents for r in DemoProcessorRefund.objects.all()] == [699]
    body = Email.objects.get(ticket=ticket).body
    assert "Order 1042: $6.99" in body and "The tracking shows 1044 on time." in body


def test_a_manager_lowers_one_order_and_pays_the_other_in_full(transactional_db, manager):
    ticket = managers_ticket()
    assert ticket.required_role == "manager" and ticket.pending_payload["config"]["allow_edit"]
    decision = decide(ticket, manager, orders={"1045": {"answer": "approve", "amount_cents": 3000}})
    # 1042 is left out: it gets the answer for all (approve, in full).
    assert decision.orders == {"1045": shipped(3000), "1042": shipped(699)}
    # What is refunded changed: an edit, with what it pays.
    event = AuditEvent.objects.get(ticket=ticket, action="edit")
    assert event.amount_cents == 3699

    assert runner.advance(ticket.pk) == "refunded"
    paid = dict(Charge.objects.filter(ticket=ticket).values_list("order__number", "amount_cents"))
    assert paid == {"1045": 3000, "1042": 699}
    keys = set(DemoProcessorRefund.objects.values_list("idempotency_key", flat=True))
    assert keys == {
        f"{ticket.thread_id}:charge_card:1045:3000",
        f"{ticket.thread_id}:charge_card:1042:699",
    }


def test_rejecting_every_order_is_a_rejection_and_moves_no_money(transactional_db, agent):
    ticket = agents_ticket()
    decision = decide(ticket, agent, answer="reject", reason="The carrier's delay. Sorry.")
    assert decision.answer == "reject"
    assert decision.orders == {
        "1042": {"answer": "reject", "reason": "The carrier's delay. Sorry."},
        "1044": {"answer": "reject", "reason": "The carrier's delay. Sorry."},
    }
    assert runner.advance(ticket.pk) == "rejected"
    assert not Charge.objects.filter(ticket=ticket).exists()
    assert not DemoProcessorRefund.objects.exists()
    assert Email.objects.filter(ticket=ticket).count() == 1


def test_each_order_may_carry_its_own_reason(transactional_db, agent):
    ticket = agents_ticket()
    decision = decide(
        ticket,
        agent,
        answer="reject",
        orders={"1042": {"answer": "reject", "reason": "Own reason."}},
        reason="Shared.",
    )
    assert decision.orders["1042"]["reason"] == "Own reason."
    assert decision.orders["1044"]["reason"] == "Shared."


BAD = [
    ({"9999": {"answer": "approve"}}, "covers no order 9999"),
    ({"1043": {"answer": "approve"}}, "Order 1043 is declined by policy"),
    ({"1042": {"answer": "maybe"}}, "Choose approve or reject for order 1042"),
    ({"1042": "approve"}, "Order 1042: give its answer"),
    (["1042"], "must map each order number"),
    ({"1042": {"answer": "reject"}}, "Give a reason for rejecting order 1042"),
    ({"1042": {"answer": "approve", "amount_cents": 0}}, "more than $0.00"),
    ({"1042": {"answer": "approve", "amount_cents": 700}}, "at most the $6.99 proposed"),
    ({"1042": {"answer": "approve", "amount_cents": "6.99"}}, "dollars and cents"),
    ({"1042": {"answer": "approve", "amount_cents": True}}, "dollars and cents"),
    ({"1042": {"answer": "reject", "reason": "x", "amount_cents": 5}}, "only an approval"),
    ({"1042": {"answer": "approve", "extra": 1}}, "unknown field(s) extra"),
    ({"1042": {"answer": "reject", "reason": "x" * 1001}}, "too long"),
]


@pytest.mark.parametrize(("orders", "words"), BAD, ids=[w for _, w in BAD])
def test_a_bad_answer_per_order_is_refused_and_nothing_is_recorded(
    transactional_db, manager, orders, words
):
    # 1042's $6.99 with an on-time 1043, and a large 1045 so a manager decides (and may lower).
    ticket = several(("1042", 4, 699), ("1043", -1, 499), ("1045", 6, 4800))
    with pytest.raises(services.RefundError) as refused:
        decide(ticket, manager, orders=orders)
    assert words in str(refused.value)
    assert not Decision.objects.exists()
    assert not AuditEvent.objects.filter(ticket=ticket).exclude(action="open").exists()
    assert Ticket.objects.get(pk=ticket.pk).status == "awaiting_review"


def test_a_total_amount_is_refused_for_several_orders(transactional_db, manager):
    ticket = managers_ticket()
    with pytest.raises(services.RefundError, match="lower an order's own amount"):
        decide(ticket, manager, amount_cents=1000)
    assert not Decision.objects.exists()


def test_a_reject_for_all_without_a_reason_is_refused(transactional_db, agent):
    ticket = agents_ticket()
    with pytest.raises(services.RefundError, match="Give a reason for rejecting order 1042"):
        decide(ticket, agent, answer="reject")
    assert not Decision.objects.exists()


def test_a_ticket_of_one_order_is_answered_per_order_too(transactional_db, agent):
    make_order("1042")
    ticket = services.ticket_open(order_number="1042")
    assert runner.advance(ticket.pk) == "awaiting_review"
    ticket.refresh_from_db()
    # One shape for one order or several: its answer per order is its answer.
    decision = decide(ticket, agent, orders={"1042": {"answer": "approve"}})
    assert decision.orders == {"1042": shipped(ticket.amount_cents)}


def test_an_agent_may_not_lower_an_orders_amount(transactional_db, agent):
    ticket = agents_ticket()
    with pytest.raises(PermissionDenied, match="Only a manager lowers an amount"):
        decide(ticket, agent, orders={"1044": {"answer": "approve", "amount_cents": 1000}})
    assert not Decision.objects.exists()
    # Its full amount is no edit: an agent approves it as asked.
    decision = decide(ticket, agent, orders={"1044": {"answer": "approve", "amount_cents": 1250}})
    assert decision.orders["1044"] == shipped(1250)


def test_four_eyes_holds_for_several_orders(transactional_db, agent, colleague):
    ticket = agents_ticket(opened_by=agent)
    with pytest.raises(PermissionDenied, match="four-eyes"):
        decide(ticket, agent, orders={"1042": {"answer": "approve"}})
    assert not Decision.objects.exists()
    assert decide(ticket, colleague).orders is not None


def test_an_agent_may_not_decide_a_flagged_ticket_of_several(transactional_db, agent, manager):
    ticket = several(("1042", 4, 699), ("1049", 5, 15000))
    assert ticket.required_role == "manager"
    with pytest.raises(PermissionDenied):
        decide(ticket, agent, orders={"1042": {"answer": "approve"}})
    assert not Decision.objects.exists()
    decide(ticket, manager, orders={"1049": {"answer": "reject", "reason": "Looks odd."}})


def test_a_claim_holds_for_several_orders(transactional_db, agent, colleague):
    ticket = agents_ticket()
    services.review_claim(ticket=ticket, by=colleague)
    ticket.refresh_from_db()
    with pytest.raises(services.ClaimTaken):
        decide(ticket, agent, orders={"1042": {"answer": "approve"}})
    assert not Decision.objects.exists()


def test_bulk_approve_approves_every_open_order_of_a_ticket(transactional_db, agent):
    ticket = agents_ticket()
    results = services.reviews_approve_bulk(
        picks=[(ticket.pk, ticket.pending_interrupt_id)], by=agent
    )
    assert results == [
        {
            "ticket": ticket.pk,
            "ok": True,
            "order": "1042, 1044, 1043",
            "text": "Approved $19.49 for orders 1042, 1044, 1043 — being paid out",
        }
    ]
    assert Decision.objects.get().orders == {"1042": shipped(699), "1044": shipped(1250)}
    assert runner.advance(ticket.pk) == "refunded"
    assert sorted(DemoProcessorRefund.objects.values_list("amount_cents", flat=True)) == [699, 1250]


def test_the_agent_limit_counts_the_tickets_total(transactional_db, agent, manager):
    # $12.50 and $20.00: each within an agent's $20.00, together $32.50: a manager's.
    ticket = several(("1044", 3, 1250), ("1047", 2, 2000))
    assert (ticket.amount_cents, ticket.required_role) == (3250, "manager")
    with pytest.raises(PermissionDenied):
        decide(ticket, agent, orders={"1044": {"answer": "approve"}})
    [result] = services.reviews_approve_bulk(
        picks=[(ticket.pk, ticket.pending_interrupt_id)], by=agent
    )
    assert result["ok"] is False
    assert not Decision.objects.exists()
    decide(ticket, manager)
    assert Decision.objects.get().answer == "approve"


def test_a_per_order_answer_reads_as_itself_in_the_history_and_the_csv(
    transactional_db, agent, colleague, admin_user, client
):
    """Two approved and one rejected: the trail says so per order, never "approved (<the
    rejection's reason>)" nor "Edited the amount"."""
    import csv
    import io

    from django.urls import reverse

    ticket = several(("1042", 4, 699), ("1044", 3, 1250), ("1045", 6, 800), opened_by=agent)
    decide(
        ticket,
        admin_user,
        reason="1045 came on time.",
        orders={
            "1042": {"answer": "approve"},
            "1044": {"answer": "approve"},
            "1045": {"answer": "reject"},
        },
    )
    assert runner.advance(ticket.pk) == "refunded"
    client.force_login(admin_user)
    history = client.get(reverse("ops:history", args=[ticket.pk])).content.decode()
    assert "Answered per order" in history and "Edited the amount" not in history
    assert "approved (“1045 came on time.”)" not in history
    assert "approved $6.99 on 1042; approved $12.50 on 1044; rejected 1045" in history
    assert "per order, 1042 approved $6.99; 1044 approved $12.50; 1045 rejected" in history

    response = client.get(reverse("reviews:audit_export"), {"action": "answer"})
    rows = list(csv.reader(io.StringIO(b"".join(response.streaming_content).decode())))
    assert rows[1][3:8] == [
        "Answered per order",
        "admin",
        "$19.49",
        "1042 approve; 1044 approve; 1045 reject",
        "1045: 1045 came on time.",
    ]
