"""Asking the customer, whatever dies: real workers killed around the question email and between
the customer's reply and the resume it brings. Counted where it lands: the question at a real
SMTP server once, the reply applied once, one line of checkpoint history."""

from __future__ import annotations

import signal
from datetime import timedelta

import pytest
from django.utils import timezone

from devtools.faults import fired
from intake.services import message_receive
from refunds import services, tasks
from refunds.flow.nodes import close_key
from refunds.models import AuditEvent, CustomerQuestion, Decision, Ticket
from refunds.services import asking
from tests.conftest import wait_for
from tests.quiescence import quiesce
from tests.test_crash import branch_points, crash_plan, open_and_wait_for_review, status  # noqa: F401

pytestmark = pytest.mark.slow


def ask(ticket: Ticket, reviewer) -> None:
    ticket.refresh_from_db()
    services.ticket_ask(
        ticket=ticket,
        interrupt_id=ticket.pending_interrupt_id,
        reviewer=reviewer,
        question="Could you send a photo of the damage?",
    )


def until(ticket: Ticket, wanted: str, *, timeout: float = 45) -> None:
    """Sweep until the ticket is `wanted`: what beat does every few seconds."""

    def done() -> bool:
        if status(ticket) == wanted:
            return True
        services.tickets_recover()
        return False

    wait_for(done, timeout=timeout, every=0.5, what=f"ticket {ticket.pk} to be {wanted}")


def reply_by_mail(question: CustomerQuestion, body: str, key: str) -> None:
    """The customer's answer by the inbound path, to the question's reply address."""
    message_receive(
        channel="email",
        key=key,
        message_id=key,
        sender="ana@example.com",
        subject="photo",
        body=body,
        received_at=timezone.now(),
        raw=body,
        recipients=[f"replies+{question.token}@desk.example.com"],
    )


def reply_after_the_close(question: CustomerQuestion) -> None:
    """Days after the close."""
    reply_by_mail(question, "Sorry, I was away: here is the photo.", "<late-reply@customer.test>")


@pytest.fixture
def sweep_now(settings):
    settings.REFUNDS_SWEEP_GRACE_SECONDS = 0
    settings.REFUNDS_REWAKE_SECONDS = 1


@pytest.mark.parametrize("point", ["smtp:before", "smtp:after", "ask_customer"])
def test_a_worker_killed_around_the_question_email_asks_once(
    workers,
    sinks,
    crash_plan,  # noqa: F811
    sweep_now,
    agent,
    admin_user,
    late_order,
    point,  # noqa: F811
):
    env = crash_plan({"*": {"point": point, "times": 1}})
    doomed = workers("doomed", pool="solo", env=env)
    ticket = open_and_wait_for_review("1042", agent)
    ask(ticket, admin_user)
    wait_for(lambda: not doomed.alive, timeout=30, what="the worker to die around the question")
    workers("second", pool="solo", env=env)
    until(ticket, "awaiting_customer")
    quiesce(workers)
    question = CustomerQuestion.objects.get(ticket=ticket)
    wait_for(lambda: sinks.smtp.count(ticket.thread_id), what="the question email")
    # "smtp:after" is the outbox's one window (the server took it, the sent mark did not
    # commit): a second identical copy is allowed there, and only there (DESIGN.md 6b).
    sent = sinks.smtp.keys()[question.email_key]
    assert sent == 1 or (point == "smtp:after" and sent == 2)
    assert branch_points(ticket) == []


@pytest.mark.parametrize("point", ["resume", "await_reply", "after:await_reply"])
def test_a_worker_killed_between_the_reply_and_the_resume_resumes_once(
    workers,
    sinks,
    crash_plan,  # noqa: F811
    sweep_now,
    agent,
    admin_user,
    late_order,
    point,  # noqa: F811
):
    env = crash_plan({})
    doomed = workers("doomed", pool="solo", env=env)
    ticket = open_and_wait_for_review("1042", agent)
    ask(ticket, admin_user)
    until(ticket, "awaiting_customer")
    question = CustomerQuestion.objects.get(ticket=ticket)
    crash_plan({"*": {"point": point, "times": 1}})  # armed for the reply's resume
    reply_by_mail(question, "Here is the photo: the vase is in pieces.", "<reply@customer.test>")
    wait_for(lambda: not doomed.alive, timeout=30, what="the worker to die around the resume")
    workers("second", pool="solo", env=env)
    until(ticket, "awaiting_review")
    quiesce(workers)
    ticket.refresh_from_db()
    assert "the vase is in pieces" in ticket.pending_payload["description"]
    [reply] = Decision.objects.filter(ticket=ticket, answer="reply")
    assert reply.applied_at is not None and reply.refused_reason == ""
    assert sinks.smtp.keys() == {question.email_key: 1}
    assert branch_points(ticket) == []


@pytest.mark.parametrize("point", ["smtp:before", "smtp:after", "close_no_reply"])
def test_a_worker_killed_around_the_close_email_closes_once_and_a_reply_reopens(
    workers,
    sinks,
    crash_plan,  # noqa: F811
    sweep_now,
    settings,
    agent,
    admin_user,
    late_order,
    point,  # noqa: F811
):
    """REFUNDS_ASK_DEFAULT_OUTCOME "close": the wait's timer gives up, a worker dies around the
    email saying the ticket is closed; the next one closes it with that email sent once."""
    settings.REFUNDS_ASK_DEFAULT_OUTCOME = "close"  # the timer's audit, in this process
    env = crash_plan({}) | {"REFUNDS_ASK_DEFAULT_OUTCOME": "close"}
    doomed = workers("doomed", pool="solo", env=env)
    ticket = open_and_wait_for_review("1042", agent)
    ask(ticket, admin_user)
    until(ticket, "awaiting_customer")
    question = CustomerQuestion.objects.get(ticket=ticket)
    crash_plan({"*": {"point": point, "times": 1}})  # armed for the close
    later = timezone.now() + timedelta(days=settings.REFUNDS_ASK_GIVE_UP_DAYS + 1)
    assert asking.questions_wait_timers(now=later)["ended"] == [ticket.pk]
    wait_for(lambda: not doomed.alive, timeout=30, what="the worker to die around the close")
    workers("second", pool="solo", env=env)
    until(ticket, "closed")
    quiesce(workers)
    closing = close_key(ticket.thread_id, question.decision_id)
    wait_for(lambda: sinks.smtp.count(closing), what="the close email")
    sent = sinks.smtp.keys()[closing]
    assert sent == 1 or (point == "smtp:after" and sent == 2)  # the outbox's one window
    assert sinks.smtp.keys()[question.email_key] == 1
    reply_after_the_close(question)
    until(ticket, "awaiting_review")
    quiesce(workers)
    ticket.refresh_from_db()
    assert "Sorry, I was away" in ticket.pending_payload["description"]
    assert Decision.objects.filter(ticket=ticket, answer="reply").count() == 1
    assert branch_points(ticket) == []


@pytest.mark.parametrize("point", ["resume", "await_reopen", "after:await_reopen"])
def test_a_worker_sigkilled_between_a_reply_after_the_close_and_the_reopening_reopens_once(
    workers,
    sinks,
    crash_plan,  # noqa: F811
    sweep_now,
    settings,
    agent,
    admin_user,
    late_order,
    point,  # noqa: F811
):
    """The ticket is closed for want of a reply; the customer's reply comes, is recorded, and
    the worker reopening the thread with it is stopped at `point` and SIGKILLed there (its
    whole process group, no cleanup). The next worker reopens the ticket once: one reply
    applied, one reopening on the timeline, one line of checkpoint history, and at the SMTP
    server nothing twice and nothing new (the question and the close email, once each)."""
    settings.REFUNDS_ASK_DEFAULT_OUTCOME = "close"  # the timer's audit, in this process
    env = crash_plan({}) | {"REFUNDS_ASK_DEFAULT_OUTCOME": "close"}
    doomed = workers("doomed", pool="solo", env=env)
    ticket = open_and_wait_for_review("1042", agent)
    ask(ticket, admin_user)
    until(ticket, "awaiting_customer")
    question = CustomerQuestion.objects.get(ticket=ticket)
    later = timezone.now() + timedelta(days=settings.REFUNDS_ASK_GIVE_UP_DAYS + 1)
    assert asking.questions_wait_timers(now=later)["ended"] == [ticket.pk]
    until(ticket, "closed")
    closing = close_key(ticket.thread_id, question.decision_id)
    wait_for(lambda: sinks.smtp.count(closing), what="the close email")
    crash_plan({"*": {"point": point, "times": 1, "action": "stop"}})  # armed for the reopening
    reply_after_the_close(question)
    wait_for(
        lambda: any(f"@{point}@" in marker for marker in fired(crash_plan.path)),
        timeout=30,
        what=f"the worker to stop at {point}",
    )
    doomed.kill()  # SIGKILL, where it stands
    assert not doomed.alive
    workers("second", pool="solo", env=env)
    until(ticket, "awaiting_review")
    quiesce(workers)
    ticket.refresh_from_db()
    assert "Sorry, I was away" in ticket.pending_payload["description"]
    [reply] = Decision.objects.filter(ticket=ticket, answer="reply")
    assert reply.applied_at is not None and reply.refused_reason == ""
    replies = AuditEvent.objects.filter(ticket=ticket, action=AuditEvent.Action.REPLY)
    assert [event.answer.get("reopened") for event in replies] == [None, True]  # give-up, reply
    assert sinks.smtp.keys() == {question.email_key: 1, closing: 1}
    assert branch_points(ticket) == []


@pytest.mark.parametrize("point", ["smtp:before", "smtp:after"])
def test_a_housekeeping_worker_killed_around_the_reminder_reminds_once(
    workers,
    sinks,
    crash_plan,  # noqa: F811
    sweep_now,
    settings,
    agent,
    admin_user,
    late_order,
    point,  # noqa: F811
):
    """The wait's timer runs in a real housekeeping worker, which dies around the reminder's
    SMTP conversation; beat's next tick, in another worker, reminds the customer once (at the
    SMTP server), and the question itself went once."""
    env = crash_plan({})
    workers("threads", pool="solo", env=env, queues="threads")
    ticket = open_and_wait_for_review("1042", agent)
    ask(ticket, admin_user)
    until(ticket, "awaiting_customer")
    question = CustomerQuestion.objects.get(ticket=ticket)
    wait_for(lambda: sinks.smtp.count(ticket.thread_id), what="the question email")
    reminder = question.email_key + asking.REMINDER_SUFFIX
    due = timezone.now() - timedelta(days=settings.REFUNDS_ASK_REMIND_DAYS, hours=1)
    CustomerQuestion.objects.filter(pk=question.pk).update(asked_at=due)
    crash_plan({"*": {"point": point, "times": 1}})  # armed for the reminder
    doomed = workers("keeper", pool="solo", env=env, queues="housekeeping")
    tasks.escalate_overdue_reviews.delay()
    wait_for(lambda: not doomed.alive, timeout=30, what="the worker to die around the reminder")
    workers("keeper2", pool="solo", env=env, queues="housekeeping")

    def reminded() -> bool:
        if sinks.smtp.keys().get(reminder):
            return True
        tasks.escalate_overdue_reviews.delay()  # beat's next tick
        return False

    wait_for(reminded, timeout=60, every=2, what="the reminder at the SMTP server")
    quiesce(workers)
    sent = sinks.smtp.keys()[reminder]
    assert sent == 1 or (point == "smtp:after" and sent == 2)  # the outbox's one window
    assert sinks.smtp.keys()[question.email_key] == 1
    assert CustomerQuestion.objects.get(pk=question.pk).reminded_at is not None
    status_now = status(ticket)
    assert status_now == "awaiting_customer", status_now


@pytest.mark.parametrize("then", ["woken", "killed"])
def test_a_reply_before_the_wait_is_kept_and_resumes_it_once_whatever_the_worker_does(
    workers,
    sinks,
    crash_plan,  # noqa: F811
    sweep_now,
    agent,
    admin_user,
    late_order,
    then,
):
    """Issue 44 item 4: the question is in the customer's mailbox once the mail server took
    it; the worker that sent it is stopped (SIGSTOP) right after, the wait not reached, and the
    customer's reply comes then. The worker is woken (SIGCONT), or SIGKILLed and another takes
    the thread on. Either way the reply resumes the wait once: the review is back quoting it,
    one reply applied, the question once at the SMTP server, no reminder, no second answer."""
    env = crash_plan({})
    doomed = workers("doomed", pool="solo", env=env)
    ticket = open_and_wait_for_review("1042", agent)
    crash_plan({"*": {"point": "after:ask_customer", "times": 1, "action": "stop"}})
    ask(ticket, admin_user)
    wait_for(
        lambda: any("@after:ask_customer@" in marker for marker in fired(crash_plan.path)),
        timeout=30,
        what="the worker to stop after the question went",
    )
    question = CustomerQuestion.objects.get(ticket=ticket)
    assert sinks.smtp.keys() == {question.email_key: 1}
    assert status(ticket) == "running"
    reply_by_mail(question, "Here is the photo: the vase is in pieces.", "<early@customer.test>")
    if then == "woken":
        doomed.signal(signal.SIGCONT)
    else:
        doomed.kill()  # SIGKILL, where it stands
        workers("second", pool="solo", env=env)
    until(ticket, "awaiting_review")
    quiesce(workers)
    ticket.refresh_from_db()
    assert "the vase is in pieces" in ticket.pending_payload["description"]
    [reply] = Decision.objects.filter(ticket=ticket, answer="reply")
    assert reply.applied_at is not None and reply.refused_reason == ""
    assert sinks.smtp.keys() == {question.email_key: 1}
    assert branch_points(ticket) == []
