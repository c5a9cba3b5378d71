"""Services: deciding a review, the recovery sweep's choice of tickets, an admin's retry."""

from __future__ import annotations

from datetime import timedelta

import pytest
from django.core.exceptions import PermissionDenied
from django.utils import timezone

from refunds import enqueue, services
from refunds.models import Decision, Fork, Ticket
from tests.conftest import make_order

PENDING = "a" * 32
OTHER = "b" * 32


@pytest.fixture(autouse=True)
def fast_passwords(settings):
    settings.PASSWORD_HASHERS = ["django.contrib.auth.hashers.MD5PasswordHasher"]


@pytest.fixture
def woken(monkeypatch) -> list[int]:
    """Ticket ids services asked a worker to advance (once their transaction commits)."""
    ids: list[int] = []
    monkeypatch.setattr(enqueue, "wake", ids.append)
    return ids


@pytest.fixture
def commit(django_capture_on_commit_callbacks):
    """`with commit():` runs the on-commit callbacks registered inside it, as a commit would."""
    return lambda: django_capture_on_commit_callbacks(execute=True)


def awaiting(order, *, role: str = "agent", interrupt_id: str = PENDING, **fields) -> Ticket:
    amount = fields.get("amount_cents") or order.shipping_fee_cents
    return Ticket.objects.create(
        thread_id=f"refund-{order.number}-{Ticket.objects.count()}",
        order=order,
        status=Ticket.Status.AWAITING_REVIEW,
        required_role=role,
        pending_interrupt_id=interrupt_id,
        pending_payload={
            "required_role": role,
            "orders": [
                {
                    "number": order.number,
                    "amount_cents": amount,
                    "status": "open",
                    "parts": [{"shipping": True, "amount_cents": amount}],
                    "order": order.facts(),
                }
            ],
        },
        **fields,
    )


def age(ticket: Ticket, seconds: float) -> None:
    # QuerySet.update() leaves auto_now alone, so this sets how long ago the row last changed.
    then = timezone.now() - timedelta(seconds=seconds)
    Ticket.objects.filter(pk=ticket.pk).update(updated_at=then)


# --- ticket_decide -------------------------------------------------------------------------------
def test_an_agent_approves_a_pending_review(agent, late_order, woken, commit):
    ticket = awaiting(late_order)

    with commit():
        decision = services.ticket_decide(
            ticket=ticket,
            interrupt_id=PENDING,
            reviewer=agent,
            orders=services.review_answers(ticket, answer="approve"),
        )

    assert decision.reviewer == agent and decision.answer == "approve"
    assert decision.applied_at is None  # a worker applies it
    assert woken == [ticket.pk]


def test_a_rejection_keeps_its_reason(agent, late_order, woken, commit):
    ticket = awaiting(late_order)
    decision = services.ticket_decide(
        ticket=ticket,
        interrupt_id=PENDING,
        reviewer=agent,
        orders=services.review_answers(ticket, answer="reject", reason="  Voucher already sent  "),
    )
    assert decision.reason == "Voucher already sent"


def test_a_manager_decides_a_manager_ticket(manager, big_order, woken, commit):
    ticket = awaiting(big_order, role="manager")
    with commit():
        services.ticket_decide(
            ticket=ticket,
            interrupt_id=PENDING,
            reviewer=manager,
            orders=services.review_answers(ticket, answer="approve"),
        )
    assert Decision.objects.get().reviewer == manager and woken == [ticket.pk]


def test_an_admin_decides_any_ticket(admin_user, late_order, big_order):
    for n, (order, role) in enumerate([(late_order, "agent"), (big_order, "manager")]):
        ticket = awaiting(order, role=role, interrupt_id=str(n) * 32)
        services.ticket_decide(
            ticket=ticket,
            interrupt_id=str(n) * 32,
            reviewer=admin_user,
            orders=services.review_answers(ticket, answer="approve"),
        )
    assert Decision.objects.count() == 2


def assert_nothing_written(woken) -> None:
    assert Decision.objects.count() == 0
    assert woken == []


def test_it_refuses_an_unknown_answer(agent, late_order, woken, commit):
    ticket = awaiting(late_order)
    with commit(), pytest.raises(services.RefundError, match="Choose approve or reject"):
        services.ticket_decide(
            ticket=ticket,
            interrupt_id=PENDING,
            reviewer=agent,
            orders=services.review_answers(ticket, answer="maybe"),
        )
    assert_nothing_written(woken)


@pytest.mark.parametrize("reason", ["", "   "])
def test_it_refuses_a_rejection_without_a_reason(agent, late_order, woken, commit, reason):
    ticket = awaiting(late_order)
    with commit(), pytest.raises(services.RefundError, match="Give a reason"):
        services.ticket_decide(
            ticket=ticket,
            interrupt_id=PENDING,
            reviewer=agent,
            orders=services.review_answers(ticket, answer="reject", reason=reason),
        )
    assert_nothing_written(woken)


def test_it_refuses_a_reason_that_is_too_long(agent, late_order, woken, commit):
    ticket = awaiting(late_order)
    with commit(), pytest.raises(services.RefundError, match="too long"):
        services.ticket_decide(
            ticket=ticket,
            interrupt_id=PENDING,
            reviewer=agent,
            orders=services.review_answers(
                ticket, answer="reject", reason="x" * (services.REASON_MAX + 1)
            ),
        )
    assert_nothing_written(woken)


def test_it_refuses_an_interrupt_that_is_not_pending(agent, late_order, woken, commit):
    ticket = awaiting(late_order, interrupt_id=OTHER)
    with commit(), pytest.raises(services.RefundError, match="no longer pending"):
        services.ticket_decide(
            ticket=ticket,
            interrupt_id=PENDING,
            reviewer=agent,
            orders=services.review_answers(ticket, answer="approve"),
        )
    assert_nothing_written(woken)


def test_it_refuses_a_decision_on_a_ticket_that_no_longer_waits(agent, late_order, woken, commit):
    ticket = awaiting(late_order)
    Ticket.objects.filter(pk=ticket.pk).update(status=Ticket.Status.RUNNING)
    ticket.refresh_from_db()
    with commit(), pytest.raises(services.RefundError, match="no longer pending"):
        services.ticket_decide(
            ticket=ticket,
            interrupt_id=PENDING,
            reviewer=agent,
            orders=services.review_answers(ticket, answer="approve"),
        )
    assert_nothing_written(woken)


def test_it_refuses_a_second_decision_naming_the_first_reviewer(
    agent, admin_user, late_order, woken, commit
):
    ticket = awaiting(late_order)
    with commit():
        services.ticket_decide(
            ticket=ticket,
            interrupt_id=PENDING,
            reviewer=agent,
            orders=services.review_answers(ticket, answer="approve"),
        )
    assert woken == [ticket.pk]

    with commit(), pytest.raises(services.AlreadyDecided) as refused:
        services.ticket_decide(
            ticket=ticket,
            interrupt_id=PENDING,
            reviewer=admin_user,
            orders=services.review_answers(ticket, answer="reject", reason="no"),
        )

    assert str(refused.value).startswith("Already decided: agent approved this refund at ")
    assert Decision.objects.get().reviewer == agent
    assert woken == [ticket.pk]  # no second wake


def test_already_decided_wins_over_stale_once_the_ticket_moved_on(agent, admin_user, late_order):
    ticket = awaiting(late_order)
    services.ticket_decide(
        ticket=ticket,
        interrupt_id=PENDING,
        reviewer=agent,
        orders=services.review_answers(ticket, answer="reject", reason="no"),
    )
    Ticket.objects.filter(pk=ticket.pk).update(
        status=Ticket.Status.REJECTED, pending_interrupt_id=""
    )
    ticket.refresh_from_db()

    with pytest.raises(services.AlreadyDecided, match="agent rejected this refund"):
        services.ticket_decide(
            ticket=ticket,
            interrupt_id=PENDING,
            reviewer=admin_user,
            orders=services.review_answers(ticket, answer="approve"),
        )


def test_a_manager_covers_an_agent_ticket(manager, late_order, woken, commit):
    # Managers take escalations and may cover the agents' queue when agents are away.
    ticket = awaiting(late_order, role="agent")
    with commit():
        services.ticket_decide(
            ticket=ticket,
            interrupt_id=PENDING,
            reviewer=manager,
            orders=services.review_answers(ticket, answer="approve"),
        )
    assert Decision.objects.get().reviewer == manager


def test_an_agent_may_not_decide_a_manager_ticket(agent, big_order, woken, commit):
    ticket = awaiting(big_order, role="manager")
    with commit(), pytest.raises(PermissionDenied):
        services.ticket_decide(
            ticket=ticket,
            interrupt_id=PENDING,
            reviewer=agent,
            orders=services.review_answers(ticket, answer="approve"),
        )
    assert_nothing_written(woken)


def test_a_user_without_a_role_may_not_decide(late_order, woken, commit, django_user_model):
    nobody = django_user_model.objects.create_user("nobody")
    ticket = awaiting(late_order)
    with commit(), pytest.raises(PermissionDenied):
        services.ticket_decide(
            ticket=ticket,
            interrupt_id=PENDING,
            reviewer=nobody,
            orders=services.review_answers(ticket, answer="approve"),
        )
    assert_nothing_written(woken)


# --- tickets_recover -----------------------------------------------------------------------------
@pytest.fixture
def grace(settings) -> float:
    settings.REFUNDS_SWEEP_GRACE_SECONDS = 5.0
    return 5.0


def running(order, *, lease_in: float | None = None, status=Ticket.Status.RUNNING) -> Ticket:
    ticket = Ticket.objects.create(
        thread_id=f"refund-{order.number}-{Ticket.objects.count()}",
        order=order,
        status=status,
        lease_owner="w1" if lease_in is not None else "",
        lease_expires_at=(
            timezone.now() + timedelta(seconds=lease_in) if lease_in is not None else None
        ),
    )
    return ticket


def recover(monkeypatch) -> tuple[list[int], list[int]]:
    woken: list[int] = []
    monkeypatch.setattr(enqueue, "wake", lambda ticket_id: woken.append(ticket_id) or True)
    return services.tickets_recover(), woken


def test_the_sweep_picks_a_stalled_ticket_whose_lease_expired(late_order, grace, monkeypatch):
    ticket = running(late_order, lease_in=-1)
    age(ticket, grace + 1)
    assert recover(monkeypatch) == ([ticket.pk], [ticket.pk])


def test_the_sweep_picks_a_new_ticket_that_was_never_leased(late_order, grace, monkeypatch):
    ticket = running(late_order, status=Ticket.Status.NEW)
    age(ticket, grace + 1)
    assert recover(monkeypatch)[0] == [ticket.pk]


def test_the_sweep_leaves_a_ticket_younger_than_the_grace(late_order, grace, monkeypatch):
    running(late_order, status=Ticket.Status.NEW)
    assert recover(monkeypatch) == ([], [])


def test_the_sweep_leaves_a_ticket_with_a_live_lease(late_order, grace, monkeypatch):
    ticket = running(late_order, lease_in=30)
    age(ticket, grace + 60)
    assert recover(monkeypatch) == ([], [])


def test_the_sweep_leaves_a_ticket_that_waits_on_a_person(late_order, grace, monkeypatch):
    ticket = awaiting(late_order)
    age(ticket, grace + 60)
    assert recover(monkeypatch) == ([], [])


def test_the_sweep_picks_a_recorded_decision_that_was_never_applied(
    agent, late_order, grace, monkeypatch
):
    ticket = awaiting(late_order)
    decision = Decision.objects.create(
        ticket=ticket, interrupt_id=PENDING, reviewer=agent, answer="approve"
    )
    Decision.objects.filter(pk=decision.pk).update(
        decided_at=timezone.now() - timedelta(seconds=grace + 1)
    )
    assert recover(monkeypatch) == ([ticket.pk], [ticket.pk])


def test_the_sweep_picks_a_fork_that_landed_while_a_worker_held_the_lease(
    admin_user, late_order, grace, monkeypatch
):
    # The worker's release wrote "awaiting review" over the fork's "running": only the unapplied
    # Fork row says there is work left.
    ticket = awaiting(late_order)
    fork = Fork.objects.create(ticket=ticket, by=admin_user, amount_cents=500, reason="partial")
    Fork.objects.filter(pk=fork.pk).update(created_at=timezone.now() - timedelta(seconds=grace + 1))
    age(ticket, grace + 60)
    assert recover(monkeypatch) == ([ticket.pk], [ticket.pk])


def test_the_sweep_sends_one_wake_up_per_ticket_until_a_worker_takes_it(
    late_order, grace, monkeypatch, settings
):
    """A backed-up queue must not grow by one copy of every waiting ticket per sweep."""
    from refunds import lease

    settings.REFUNDS_REWAKE_SECONDS = 30
    ticket = running(late_order, lease_in=-1)
    age(ticket, grace + 1)
    assert recover(monkeypatch)[1] == [ticket.pk]
    assert recover(monkeypatch)[1] == []  # its wake-up is still queued
    granted = lease.grant(ticket)  # a worker took it (and then died: the lease lapses)
    lapsed = timezone.now() - timedelta(seconds=1)
    Ticket.objects.filter(pk=ticket.pk).update(lease_expires_at=lapsed)
    age(ticket, grace + 1)
    assert granted and recover(monkeypatch)[1] == [ticket.pk]
    Ticket.objects.filter(pk=ticket.pk).update(
        woken_at=timezone.now() - timedelta(seconds=31)
    )  # a wake-up nobody took in 30 s may have been lost with the broker
    assert recover(monkeypatch)[1] == [ticket.pk]


def test_the_sweep_leaves_a_fresh_decision_to_its_own_task(agent, late_order, grace, monkeypatch):
    ticket = awaiting(late_order)
    Decision.objects.create(ticket=ticket, interrupt_id=PENDING, reviewer=agent, answer="approve")
    assert recover(monkeypatch) == ([], [])


@pytest.mark.parametrize("done", [{"applied_at": True}, {"refused_reason": "stale"}])
def test_the_sweep_leaves_a_ticket_whose_decision_was_applied_or_refused(
    agent, late_order, grace, monkeypatch, done
):
    ticket = awaiting(late_order)
    decision = Decision.objects.create(
        ticket=ticket, interrupt_id=OTHER, reviewer=agent, answer="approve"
    )
    fields = {k: (timezone.now() if v is True else v) for k, v in done.items()}
    Decision.objects.filter(pk=decision.pk).update(
        decided_at=timezone.now() - timedelta(seconds=grace + 60), **fields
    )
    assert recover(monkeypatch) == ([], [])


def test_the_sweep_leaves_an_undecided_review_with_a_live_lease(
    agent, late_order, grace, monkeypatch
):
    ticket = awaiting(
        late_order, lease_owner="w1", lease_expires_at=timezone.now() + timedelta(seconds=30)
    )
    decision = Decision.objects.create(
        ticket=ticket, interrupt_id=PENDING, reviewer=agent, answer="approve"
    )
    Decision.objects.filter(pk=decision.pk).update(
        decided_at=timezone.now() - timedelta(seconds=grace + 60)
    )
    assert recover(monkeypatch) == ([], [])


@pytest.mark.parametrize("status", [*Ticket.FINAL, Ticket.Status.FAILED])
def test_the_sweep_leaves_finished_and_failed_tickets(late_order, grace, monkeypatch, status):
    ticket = running(late_order, status=status)
    age(ticket, grace + 60)
    assert recover(monkeypatch) == ([], [])


def test_the_sweep_names_each_ticket_once(agent, late_order, grace, monkeypatch):
    stalled = running(late_order, lease_in=-1)
    age(stalled, grace + 1)
    waiting = awaiting(make_order("2042"))
    for interrupt_id in (PENDING, OTHER):  # two unapplied decisions join to two rows
        decision = Decision.objects.create(
            ticket=waiting, interrupt_id=interrupt_id, reviewer=agent, answer="approve"
        )
        Decision.objects.filter(pk=decision.pk).update(
            decided_at=timezone.now() - timedelta(seconds=grace + 1)
        )
    ids, woken = recover(monkeypatch)
    assert ids == woken == sorted([stalled.pk, waiting.pk])


# --- ticket_retry --------------------------------------------------------------------------------
def test_retry_puts_a_failed_ticket_back_in_line(late_order, woken, commit):
    ticket = running(late_order, status=Ticket.Status.FAILED, lease_in=-1)
    Ticket.objects.filter(pk=ticket.pk).update(attempts=6, last_error="boom")

    with commit():
        assert services.ticket_retry(ticket=ticket) is True

    ticket.refresh_from_db()
    assert ticket.status == Ticket.Status.RUNNING
    assert ticket.attempts == 0
    assert ticket.lease_owner == "" and ticket.lease_expires_at is None
    assert woken == [ticket.pk]


@pytest.mark.parametrize(
    "status",
    [Ticket.Status.NEW, Ticket.Status.RUNNING, Ticket.Status.AWAITING_REVIEW, *Ticket.FINAL],
)
def test_retry_leaves_a_ticket_that_has_not_failed(late_order, woken, commit, status):
    ticket = running(late_order, status=status, lease_in=30)
    Ticket.objects.filter(pk=ticket.pk).update(attempts=2)

    with commit():
        assert services.ticket_retry(ticket=ticket) is False

    ticket.refresh_from_db()
    assert ticket.status == status and ticket.attempts == 2 and ticket.lease_owner == "w1"
    assert woken == []


# --- ticket_open ---------------------------------------------------------------------------------
def test_opening_a_ticket_enqueues_it_after_commit(agent, late_order, woken, commit):
    with commit():
        ticket = services.ticket_open(order_number=" 1042 ", note=" late ", opened_by=agent)
    assert ticket.order == late_order and ticket.note == "late"
    assert woken == [ticket.pk]


def test_opening_a_ticket_for_an_unknown_order_writes_nothing(late_order, woken, commit):
    with commit(), pytest.raises(services.RefundError, match="There is no order 9"):
        services.ticket_open(order_number="9")
    assert Ticket.objects.count() == 0 and woken == []


# --- the audit trail ------------------------------------------------------------------------------
def test_opening_deciding_forking_retrying_and_resending_each_leave_one_audit_event(
    agent, admin_user, late_order, monkeypatch
):
    from refunds.models import AuditEvent, Email

    monkeypatch.setattr(enqueue, "wake", lambda ticket_id: True)
    ticket = services.ticket_open(order_number="1042", note="late", opened_by=agent)
    Ticket.objects.filter(pk=ticket.pk).update(
        status="awaiting_review",
        pending_interrupt_id=PENDING,
        required_role="agent",
        pending_payload={
            "required_role": "agent",
            "amount_cents": 699,
            "orders": [{"number": "1042", "amount_cents": 699, "status": "open"}],
        },
    )
    ticket.refresh_from_db()
    services.ticket_decide(
        ticket=ticket,
        interrupt_id=PENDING,
        reviewer=admin_user,
        orders=services.review_answers(ticket, answer="reject", reason="voucher"),
    )
    Ticket.objects.filter(pk=ticket.pk).update(status="failed")
    services.ticket_retry(ticket=ticket, by=admin_user)
    Ticket.objects.filter(pk=ticket.pk).update(status="rejected")
    services.ticket_fork(
        ticket=Ticket.objects.get(pk=ticket.pk), amount_cents=500, reason="part", by=admin_user
    )
    Ticket.objects.filter(pk=ticket.pk).update(status="refunded")
    email = Email.objects.create(ticket=ticket, key="k", to="a@example.com", subject="s", body="b")
    monkeypatch.setattr("refunds.enqueue.resend_on_commit", lambda email_id: None)
    services.email_resend(email_id=email.pk, by=admin_user)

    events = list(AuditEvent.objects.filter(ticket=ticket).values_list("action", "actor__username"))
    assert events == [
        ("open", "agent"),
        ("reject", "admin"),
        ("retry", "admin"),
        ("fork", "admin"),
        ("resend", "admin"),
    ]
    reject = AuditEvent.objects.get(ticket=ticket, action="reject")
    assert reject.seen["interrupt_id"] == PENDING and reject.seen["review"]["amount_cents"] == 699
    assert reject.answer == {
        "answer": "reject",
        "reason": "voucher",
        "orders": {"1042": {"answer": "reject", "reason": "voucher"}},
        "note": "",
    }
