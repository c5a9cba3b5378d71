"""The policy by reason: a late delivery goes through the lateness rules; damaged, not received,
wrong item and another request go to a manager with the reading, whatever the amount and the
lateness; "not about a refund" opens no ticket. The graph on its own first, then through the
runner with real checkpoints (and a thread paused before reasons existed)."""

from __future__ import annotations

import io

import pytest
from django.core.exceptions import PermissionDenied
from django.core.management import call_command

from intake.reading import Reading
from refunds import enqueue, persistence, policy, runner, services
from refunds.flow import versions
from refunds.models import Charge, Email, Ticket
from tests.reviewing import decide
from tests.test_graph import TICKET, Desk, order_facts

MANAGER_REASONS = [policy.DAMAGED, policy.NOT_RECEIVED, policy.WRONG_ITEM, policy.OTHER_REQUEST]


def reading_for(reason: str, *, order: str = "1042") -> dict:
    return Reading(
        reason=reason,
        orders=[order],
        amount_cents=None,
        language="en",
        summary=f"Ana says order {order} is {policy.REASONS[reason].lower()}.",
        quotes={"reason": "the mug arrived in pieces", "orders": f"#{order}"},
        read_by="anthropic:claude-test",
    ).as_json()


def start(desk: Desk, reason: str | None, reading: dict | None = None) -> dict:
    state: dict = {
        "ticket_key": TICKET,
        "order_number": "1042",
        "order_numbers": ["1042"],
        "note": "",
        "flow_version": 3,
    }
    if reason is not None:
        state |= {"reason": reason, "reading": reading}
    return desk.graph.invoke(state, desk.config, context=desk.context, durability="sync")


# --- the graph ---------------------------------------------------------------------------------
@pytest.mark.parametrize("reason", MANAGER_REASONS)
def test_a_small_on_time_refund_for_a_reason_a_person_judges_goes_to_a_manager(reason):
    desk = Desk(order_facts(late=-1, fee_cents=699))
    start(desk, reason, reading_for(reason))
    review = desk.pending().value
    assert review["required_role"] == "manager"
    assert review["amount_cents"] == 699  # the order's refundable balance, as today
    assert review["config"]["allow_edit"] is True  # a manager may lower it
    assert review["reason"] == reason
    assert review["reading"]["read_by"] == "anthropic:claude-test"
    assert review["reading"]["quotes"]["reason"] == "the mug arrived in pieces"
    assert f"reason: {policy.REASONS[reason].lower()}" in review["description"].lower()
    assert policy.reason_sentence(reason) in review["notes"]


@pytest.mark.parametrize("reason", MANAGER_REASONS)
def test_a_manager_reason_offers_only_what_is_left_on_the_order(reason):
    desk = Desk(order_facts(late=3, fee_cents=699, refunded_cents=200, refunded_by_ticket=7))
    start(desk, reason, reading_for(reason))
    assert desk.pending().value["amount_cents"] == 499


def test_a_manager_reason_with_nothing_left_to_refund_is_declined():
    desk = Desk(order_facts(fee_cents=699, refunded_cents=699, refunded_by_ticket=7))
    start(desk, policy.DAMAGED, reading_for(policy.DAMAGED))
    values = desk.state().values
    assert values["outcome"] == "declined"
    assert "already refunded in full" in values["outcome_reason"]
    assert desk.gateway.calls == []


def test_a_late_delivery_still_goes_through_todays_rules():
    on_time = Desk(order_facts(late=0, fee_cents=699))
    start(on_time, policy.LATE_DELIVERY)
    assert on_time.state().values["outcome"] == "declined"
    assert "on time" in on_time.state().values["outcome_reason"]

    small = Desk(order_facts(late=4, fee_cents=699))
    start(small, policy.LATE_DELIVERY, reading_for(policy.LATE_DELIVERY))
    assert small.pending().value["required_role"] == "agent"
    assert small.pending().value["reason"] == policy.LATE_DELIVERY


def test_a_state_without_a_reason_is_a_late_delivery():
    desk = Desk(order_facts(late=-2, fee_cents=699))
    start(desk, None)
    assert desk.state().values["outcome"] == "declined"


def test_an_approved_damaged_refund_tells_the_customer_why_without_speaking_of_lateness():
    desk = Desk(order_facts(late=-1, fee_cents=699))
    start(desk, policy.DAMAGED, reading_for(policy.DAMAGED))
    desk.answer("approve", reviewer="manager")
    assert desk.state().values["outcome"] == "refunded"
    (sent,) = desk.mailer.sent
    assert "about your report (damaged)" in sent["body"] and "late" not in sent["body"]


def test_the_policy_words_for_each_reason_live_in_policy():
    assert policy.review_role(699, flagged=False, limit_cents=2000) == "agent"
    for reason in MANAGER_REASONS:
        assert policy.review_role(1, flagged=False, limit_cents=2000, reason=reason) == "manager"
        assert "damaged" in policy.refusal_sentence("manager", reason=policy.DAMAGED)
    assert not policy.routes_by_lateness(policy.WRONG_ITEM)
    assert policy.routes_by_lateness(policy.LATE_DELIVERY)


# --- through the runner ------------------------------------------------------------------------
@pytest.fixture(autouse=True)
def no_broker(monkeypatch):
    monkeypatch.setattr(enqueue, "wake", lambda ticket_id: None)


def test_a_damaged_ticket_waits_on_a_manager_with_the_reading(
    transactional_db, manager, agent, late_order
):
    reading = reading_for(policy.DAMAGED)
    ticket = services.ticket_open(order_number="1042", reason=policy.DAMAGED, reading=reading)
    assert runner.advance(ticket.pk) == "awaiting_review"
    ticket.refresh_from_db()
    assert ticket.required_role == "manager" and ticket.amount_cents == 699
    assert ticket.pending_payload["reason"] == policy.DAMAGED
    assert ticket.pending_payload["reading"] == reading
    state = persistence.snapshot(ticket.thread_id).values
    assert state["reason"] == policy.DAMAGED and state["reading"] == reading

    with pytest.raises(PermissionDenied, match="damaged"):
        decide(ticket, agent)  # an agent may not: a manager judges it (PermissionDenied's text)


def test_not_about_a_refund_opens_no_ticket(db, late_order):
    with pytest.raises(services.RefundError, match="opens no refund ticket"):
        services.ticket_open(order_number="1042", reason=policy.NOT_REFUND)
    assert Ticket.objects.count() == 0


def test_a_thread_paused_before_reasons_existed_resumes_to_its_end_as_a_late_delivery(
    transactional_db, admin_user, late_order, monkeypatch
):
    old = 2  # the version before reasons
    real_input = runner.initial_input

    def before_reasons(lease):  # what version 2's runner started a thread with, on today's graph
        values = dict(real_input(lease))
        values.pop("reason"), values.pop("reading")
        return values | {"flow_version": old}

    monkeypatch.setattr(runner, "initial_input", before_reasons)
    monkeypatch.setattr(runner, "FLOW_VERSION", old)
    ticket = services.ticket_open(order_number="1042")
    Ticket.objects.filter(pk=ticket.pk).update(flow_version=old)
    assert runner.advance(ticket.pk) == "awaiting_review"
    paused_state = persistence.snapshot(ticket.thread_id).values
    assert "reason" not in paused_state and paused_state["flow_version"] == old
    monkeypatch.undo()  # the new release
    call_command("upgrade_threads", stdout=io.StringIO())

    ticket.refresh_from_db()
    decide(ticket, admin_user)
    assert runner.advance(ticket.pk) == "refunded"
    state = persistence.snapshot(ticket.thread_id).values
    assert state["flow_version"] == versions.FLOW_VERSION
    assert state["reason"] == policy.LATE_DELIVERY and state["reading"] is None
    assert list(Charge.objects.values_list("amount_cents", flat=True)) == [699]
    assert "which arrived 4 days late" in Email.objects.get(ticket=ticket).body
