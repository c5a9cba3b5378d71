"""The late guards, tested where each race happens: the caller's early check has passed on its
copy of the row, and only the guard at the write (a compare-and-set, the runner's check under
the lease) stands between the race and a wrong effect."""

from __future__ import annotations

import json
from datetime import timedelta
from functools import partial

import pytest
from django.db.models import F
from django.utils import timezone

from devtools import faults
from intake import workflow
from intake.models import Message
from refunds import enqueue, lease, payments, persistence, runner, services
from refunds.models import AuditEvent, Charge, Decision, Fork, Ticket
from refunds.payments import DemoGateway
from refunds.payments.demo import DemoProcessorRefund
from tests.conftest import make_order
from tests.reviewing import advance_to_review, awaiting_review, decide
from tests.test_desk_races import at_once
from tests.test_intake_workflow import LATE, receive


@pytest.fixture(autouse=True)
def no_broker(monkeypatch):
    monkeypatch.setattr(enqueue, "send", lambda *args, **kwargs: True)  # the tests advance by hand


def test_a_decision_for_a_review_a_fork_replaced_after_the_page_read_it_is_refused(
    db, agent, late_order
):
    """The reviewer's page read the review; a fork applied meanwhile put a new interrupt in
    its place. The service's early check reads the page's copy and passes: the UPDATE that
    records the decision must refuse it, before the reviewer is told "being paid out"."""
    ticket = awaiting_review(late_order)
    read_by_the_page = Ticket.objects.get(pk=ticket.pk)
    Ticket.objects.filter(pk=ticket.pk).update(pending_interrupt_id="f" * 32)  # the fork's
    with pytest.raises(services.RefundError, match="no longer pending"):
        decide(read_by_the_page, agent)
    assert not Decision.objects.exists() and not AuditEvent.objects.exists()


def test_a_decision_for_a_ticket_that_left_review_after_the_page_read_it_is_refused(
    db, agent, late_order
):
    ticket = awaiting_review(late_order)
    read_by_the_page = Ticket.objects.get(pk=ticket.pk)
    Ticket.objects.filter(pk=ticket.pk).update(status=Ticket.Status.RUNNING)
    with pytest.raises(services.RefundError, match="no longer pending"):
        decide(read_by_the_page, agent)
    assert not Decision.objects.exists()


def test_two_reviewers_escalating_one_review_at_once_make_one_escalation(
    transactional_db, agent, colleague
):
    for n in range(4):
        ticket = awaiting_review(make_order(f"71{n}"))
        first, second = (Ticket.objects.get(pk=ticket.pk) for _ in range(2))  # each page's
        results = at_once(partial(_escalate, first, agent), partial(_escalate, second, colleague))
        assert sorted(results) == ["escalated", "moved on"], results
        assert AuditEvent.objects.filter(ticket=ticket, action="escalate").count() == 1


def test_an_escalation_on_a_copy_read_before_another_escalated_it_is_refused(
    db, agent, colleague, late_order
):
    ticket = awaiting_review(late_order)
    first, second = Ticket.objects.get(pk=ticket.pk), Ticket.objects.get(pk=ticket.pk)
    services.ticket_escalate(ticket=first, by=agent, note="over my head")
    with pytest.raises(services.RefundError, match="moved on meanwhile"):
        services.ticket_escalate(ticket=second, by=colleague, note="me too")
    assert AuditEvent.objects.filter(action="escalate").count() == 1
    assert Ticket.objects.get(pk=ticket.pk).escalation_note == "over my head"


def _escalate(ticket: Ticket, by) -> str:
    try:
        services.ticket_escalate(ticket=ticket, by=by, note=f"{by.username} escalates")
    except services.RefundError:
        return "moved on"
    return "escalated"


def test_a_run_started_again_on_the_same_review_keeps_its_clock(transactional_db, late_order):
    """A worker died after the review showed; the sweep runs the thread again and it stops at
    the same interrupt. The escalation timers count from when the review first showed, so its
    clock is kept, not restarted by the new run's mirror."""
    ticket = advance_to_review(services.ticket_open(order_number="1042"))
    an_hour_ago = timezone.now() - timedelta(hours=1)
    Ticket.objects.filter(pk=ticket.pk).update(
        review_since=an_hour_ago, status=Ticket.Status.RUNNING, mirror_epoch=0
    )
    assert runner.advance(ticket.pk) == "awaiting_review"
    again = Ticket.objects.get(pk=ticket.pk)
    assert again.pending_interrupt_id == ticket.pending_interrupt_id
    assert again.review_since == an_hour_ago


class ForkedDuringTheCharge(DemoGateway):
    """An admin's fork lands while the charge is under way: its service checked before the
    ledger row existed."""

    admin = None

    def charge(self, *, ticket_key: str, **kwargs) -> str:
        ticket = Ticket.objects.get(thread_id=ticket_key)
        Fork.objects.create(ticket=ticket, by=self.admin, amount_cents=100, reason="late")
        return super().charge(ticket_key=ticket_key, **kwargs)


def test_a_fork_recorded_while_the_charge_was_under_way_is_refused_by_the_next_run(
    transactional_db, agent, admin_user, late_order, settings, request, tmp_path
):
    """The worker dies after the charge, before the email; the next run finds the fork
    waiting and the money moved: it refuses the fork (a re-triage would pay a second amount)
    and finishes the refund it had started, paid once."""
    ticket = advance_to_review(services.ticket_open(order_number="1042"))
    decide(ticket, agent)
    ForkedDuringTheCharge.admin = admin_user
    settings.REFUNDS_GATEWAY = f"{__name__}.ForkedDuringTheCharge"
    faults.install()
    plan = tmp_path / "plan.json"
    plan.write_text(json.dumps({"*": {"point": "email", "action": "error", "times": 1}}))
    settings.REFUNDS_CRASH_PLAN = str(plan)
    settings.REFUNDS_NODE_WRAPPER = "devtools.faults.wrap_node"
    for built in (payments.get_gateway, persistence._compiled):
        built.cache_clear()  # one gateway and graph per process, built from the settings
        request.addfinalizer(built.cache_clear)
    assert runner.advance(ticket.pk) == "error"
    Ticket.objects.filter(pk=ticket.pk).update(lease_expires_at=None)  # the sweep's turn
    assert runner.advance(ticket.pk) == "refunded"
    fork = Fork.objects.get()
    assert fork.applied_at is None and "Money moved before the fork" in fork.refused_reason
    ticket.refresh_from_db()
    assert ticket.amount_cents == 699
    assert [(c.amount_cents, c.status) for c in Charge.objects.all()] == [(699, "succeeded")]
    assert DemoProcessorRefund.objects.count() == 1  # at the processor: one refund


def _taken_over_before(name: str, fn):
    """WORKFLOW_TASK_WRAPPER: a successor takes the message over just before `name` runs. The
    worker's own lease still believes it holds (renewed a moment ago), so the task's early
    `lease.check()` passes: only the fenced UPDATE at its write stands in the way."""

    def task(item, *args):
        if name == f"intake:{TAKEN_OVER_AT['task']}":
            Message.objects.filter(pk=item["message_id"]).update(lease_epoch=F("lease_epoch") + 1)
        return fn(item, *args)

    return task


TAKEN_OVER_AT = {"task": ""}


@pytest.mark.parametrize("task", ["read", "open_ticket"])
def test_an_intake_task_whose_message_was_taken_over_after_its_early_check_writes_nothing(
    transactional_db, settings, monkeypatch, task
):
    make_order("1042")
    monkeypatch.setitem(TAKEN_OVER_AT, "task", task)
    settings.WORKFLOW_TASK_WRAPPER = "tests.test_late_guards._taken_over_before"
    message = receive(LATE.format(n=1042))
    try:
        assert workflow.message_take(message.pk) == "lease lost"
    finally:
        workflow._compiled.cache_clear()
    message.refresh_from_db()
    assert message.status == Message.Status.RECEIVED and not Ticket.objects.exists()
    if task == "read":
        assert message.reading is None


def test_a_renewal_after_a_takeover_fails_and_leaves_the_successors_lease_as_it_was(
    transactional_db, late_order
):
    """The paused worker's keeper wakes and renews: only its own epoch may, or it would go on
    believing it holds the thread (and stretch the successor's lease)."""
    ticket = services.ticket_open(order_number="1042")
    first = lease.grant(ticket.pk, owner="paused-worker")
    assert first is not None
    lapsed = timezone.now() - timedelta(seconds=1)  # it ran out
    Ticket.objects.filter(pk=ticket.pk).update(lease_expires_at=lapsed)
    successor = lease.grant(ticket.pk, owner="successor")
    assert successor is not None and successor.epoch == first.epoch + 1
    expires = Ticket.objects.values_list("lease_expires_at", flat=True).get(pk=ticket.pk)
    assert first.renew() is False
    assert Ticket.objects.values_list("lease_expires_at", flat=True).get(pk=ticket.pk) == expires
    assert successor.renew() is True
