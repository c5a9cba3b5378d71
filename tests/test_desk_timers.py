"""The escalation timers, with the clock moved forward (time-machine), never slept: a review
waiting past REFUNDS_REVIEW_WARN_MINUTES is highlighted, past REFUNDS_REVIEW_ESCALATE_MINUTES it
goes to managers, who get one reminder email listing the overdue reviews."""

from __future__ import annotations

from datetime import timedelta

import pytest
import time_machine
from django.core import mail
from django.utils.timezone import now as timezone_now

from refunds import tasks
from refunds.models import AuditEvent, Email, Ticket
from tests.conftest import make_order
from tests.reviewing import awaiting_review


@pytest.fixture
def desk(settings, agent, manager):
    settings.REFUNDS_REVIEW_WARN_MINUTES = 15
    settings.REFUNDS_REVIEW_ESCALATE_MINUTES = 60
    manager.email = "mara@example.com"
    manager.save()
    return settings


def test_a_waiting_review_is_highlighted_then_escalated_and_managers_reminded_once(
    client, desk, agent, manager
):
    with time_machine.travel("2026-12-01 09:00 +0000", tick=False) as clock:
        small = awaiting_review(make_order("8001", fee_cents=699))
        big = awaiting_review(make_order("8002", fee_cents=4800))
        client.force_login(agent)
        assert "overdue" not in client.get("/").content.decode()

        clock.shift(timedelta(minutes=16))
        html = client.get("/").content.decode()
        assert "overdue" in html and "16 min" in html
        assert tasks.escalate_overdue_reviews() == 0  # highlighted, not escalated yet
        assert mail.outbox == []

        clock.shift(timedelta(minutes=45))  # 61 minutes
        assert tasks.escalate_overdue_reviews() == 3  # one escalation, two reminders
        assert Ticket.objects.get(pk=small.pk).is_escalated
        assert [t.pk for t in client.get("/").context["reviews"]] == []  # left the agents
        client.force_login(manager)
        assert {t.pk for t in client.get("/").context["reviews"]} == {small.pk, big.pk}
        event = AuditEvent.objects.get(ticket=small, action="escalate")
        assert event.actor is None and event.answer["by"] == "timer"

        [reminder] = mail.outbox
        assert reminder.to == ["mara@example.com"]
        assert reminder.subject == "Refund Desk: 2 reviews overdue"
        assert "Order 8001: $6.99, waiting 61 minutes" in reminder.body
        assert "Order 8002: $48.00, waiting 61 minutes" in reminder.body

        clock.shift(timedelta(minutes=30))
        assert tasks.escalate_overdue_reviews() == 0  # once per review, not every beat
        assert len(mail.outbox) == 1


def test_a_review_decided_in_time_is_never_escalated(client, desk, colleague):
    with time_machine.travel("2026-12-01 09:00 +0000", tick=False) as clock:
        ticket = awaiting_review(make_order("8003", fee_cents=699))
        clock.shift(timedelta(minutes=30))
        client.force_login(colleague)
        form = {"interrupt_id": ticket.pending_interrupt_id, "approve": "1"}
        client.post(f"/reviews/{ticket.pk}/decide/", form)
        Ticket.objects.filter(pk=ticket.pk).update(status="refunded", pending_interrupt_id="")
        clock.shift(timedelta(hours=2))
        assert tasks.escalate_overdue_reviews() == 0
    assert mail.outbox == []
    assert not AuditEvent.objects.filter(action="escalate").exists()


def test_the_timers_run_on_celery_beat(settings):
    entry = settings.CELERY_BEAT_SCHEDULE["review-escalation-timers"]
    assert entry["task"] == "refunds.tasks.escalate_overdue_reviews"
    assert entry["schedule"] == settings.REFUNDS_TIMER_SECONDS


def test_a_reminder_the_mail_server_refuses_waits_in_the_outbox_and_is_resent_once(
    client, desk, smtp, admin_user
):
    """The reminder goes through the outbox: refused, it is neither lost nor marked sent; it
    shows on the admins' Undelivered page, and a Resend delivers it once."""
    with time_machine.travel("2026-12-01 09:00 +0000", tick=False) as clock:
        awaiting_review(make_order("8004", fee_cents=4800))
        clock.shift(timedelta(minutes=61))
        smtp.refuse(-1, code=550)
        assert tasks.escalate_overdue_reviews() == 1
        assert tasks.escalate_overdue_reviews() == 0  # reminded once, tried again
        row = Email.objects.get(key__startswith="reminder:")
        assert row.status == "pending" and "550" in row.last_error and row.attempts == 2
        assert smtp.count() == 0
        smtp.accept()
        client.force_login(admin_user)
        page = client.get("/ops/undelivered/").content.decode()
        assert "Reminder to a manager: Refund Desk: 1 review overdue" in page
        client.post(f"/ops/undelivered/{row.pk}/resend/")
        assert tasks.resend_email(row.pk) is True  # what the Resend enqueued, run here
        assert smtp.count("reminder:") == 1
        assert tasks.escalate_overdue_reviews() == 0
        assert smtp.count("reminder:") == 1


def test_a_reminder_whose_delivery_died_is_sent_by_the_next_run(desk, smtp):
    """The reminder was marked and put in the outbox, then the timer's process died before
    delivering it: the next run delivers it, once."""
    with time_machine.travel("2026-12-01 09:00 +0000", tick=False) as clock:
        ticket = awaiting_review(make_order("8005", fee_cents=4800))
        clock.shift(timedelta(minutes=61))
        from refunds.services import timers

        assert [t.pk for t in timers._remind_managers([ticket], timezone_now())] == [ticket.pk]
        assert smtp.count() == 0  # marked and queued, not delivered
        assert tasks.escalate_overdue_reviews() == 0
        assert smtp.count("reminder:") == 1
        assert Email.objects.get(key__startswith="reminder:").status == "sent"


def test_two_beats_that_both_read_a_review_as_due_remind_the_managers_once(desk):
    """The race where it happens: two beats (a slow one and the next, or two beat processes)
    each read the overdue review as not reminded yet, before either marked it. Only the
    compare-and-set on `reminded_for` stands between them and a second reminder."""
    from refunds.services import timers

    with time_machine.travel("2026-12-01 09:00 +0000", tick=False) as clock:
        ticket = awaiting_review(make_order("8006", fee_cents=4800))
        clock.shift(timedelta(minutes=61))
        read_by_one, read_by_the_other = (
            [Ticket.objects.select_related("order").get(pk=ticket.pk)] for _ in range(2)
        )
        reminded = timers._remind_managers(read_by_one, timezone_now())
        assert [t.pk for t in reminded] == [ticket.pk]
        assert timers._remind_managers(read_by_the_other, timezone_now()) == []
        assert Email.objects.filter(key__startswith="reminder:").count() == 1  # one manager
        assert tasks.escalate_overdue_reviews() == 0  # delivers what the first beat queued
    [reminder] = mail.outbox
    assert reminder.subject == "Refund Desk: 1 review overdue"
