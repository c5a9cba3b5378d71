"""A wait on the customer that ends without a reply, under REFUNDS_ASK_DEFAULT_OUTCOME "close":
the ticket is closed as "no reply" with one email (threaded with the question, its reply address,
the customer's language) saying a reply reopens it; the thread waits on that reply, and a reply
(by the inbound webhook) resumes the same thread: the review comes back quoted with its photos,
once, and the closed time counts toward no escalation."""

from __future__ import annotations

from datetime import timedelta

import pytest
import time_machine
from django.urls import reverse
from django.utils import timezone

from intake import workflow
from intake.models import Message
from intake.services import message_receive
from ops import selectors as ops_selectors
from refunds import enqueue, mail, persistence, runner, services, tasks
from refunds.flow.nodes import close_key
from refunds.models import AuditEvent, CustomerQuestion, Decision, Email, Ticket
from refunds.services import asking
from tests.reviewing import decide
from tests.test_attachments import photo, post, reply_email

REPLY_DOMAIN = "desk.example.com"
WEBHOOK_KEY = "inbound-signing-key"  # tests.test_attachments.post signs with it
SPANISH = (
    "Hola, mi pedido #1042 llegó con una semana de retraso. ¿Me pueden devolver los gastos de "
    "envío? Gracias, Ana"
)


@pytest.fixture(autouse=True)
def closing(monkeypatch, settings):
    """The test runs the threads itself; a wait without a reply closes the ticket."""
    monkeypatch.setattr(enqueue, "send", lambda name, pk: True)
    settings.REFUNDS_REPLY_ADDRESS = "replies+{token}@" + REPLY_DOMAIN
    settings.ANYMAIL = {"MAILGUN_WEBHOOK_SIGNING_KEY": WEBHOOK_KEY}
    settings.REFUNDS_ASK_DEFAULT_OUTCOME = "close"
    settings.REFUNDS_ASK_REMIND_DAYS, settings.REFUNDS_ASK_GIVE_UP_DAYS = 3, 7


def asked(ticket: Ticket, reviewer) -> CustomerQuestion:
    ticket.refresh_from_db()
    services.ticket_ask(
        ticket=ticket,
        interrupt_id=ticket.pending_interrupt_id,
        reviewer=reviewer,
        question="Could you send a photo of the damage?",
    )
    assert runner.advance(ticket.pk) == "awaiting_customer"
    return CustomerQuestion.objects.get(ticket=ticket)


def waiting_review(order, opener) -> Ticket:
    ticket = services.ticket_open(order_number=order.number, opened_by=opener)
    assert runner.advance(ticket.pk) == "awaiting_review"
    return ticket


def closed(ticket: Ticket, clock) -> None:
    """Past the reminder, then past the give-up: the timer ends the wait, a worker applies it."""
    clock.shift(timedelta(days=3, minutes=1))
    assert tasks.escalate_overdue_reviews() == 1  # the reminder
    clock.shift(timedelta(days=4))
    assert tasks.escalate_overdue_reviews() == 1  # the give-up
    assert runner.advance(ticket.pk) == "closed"
    ticket.refresh_from_db()


def reply_in(question: CustomerQuestion, *, key: str = "<reply-1@customer.test>", **given):
    fields = {"sender": "ana@example.com", "body": "Sorry, I was away: here is the photo."}
    fields |= given
    message, _ = message_receive(
        channel="email",
        key=key,
        message_id=key,
        subject="Re: your refund request",
        received_at=timezone.now(),
        raw=fields["body"],
        recipients=[f"replies+{question.token}@{REPLY_DOMAIN}"],
        **fields,
    )
    message.refresh_from_db()
    return message


def test_a_wait_without_a_reply_is_reminded_then_closed_with_one_email_in_the_customers_language(
    transactional_db, smtp, client, agent, manager, late_order
):
    with time_machine.travel("2026-12-01 09:00 +0000", tick=True) as clock:
        message, _ = message_receive(
            channel="email",
            key="<late@customer.test>",
            message_id="<late@customer.test>",
            sender="ana@example.com",
            sender_name="Ana Souza",
            subject="Pedido",
            body=SPANISH,
            received_at=timezone.now(),
            raw=SPANISH,
        )
        assert workflow.message_take(message.pk) == "finished"
        message.refresh_from_db()
        ticket = message.ticket
        assert runner.advance(ticket.pk) == "awaiting_review"
        question = asked(ticket, agent)
        closed(ticket, clock)
        # Once, whatever runs again: a redelivered task, the sweep, the next beats.
        assert runner.advance(ticket.pk) == "closed"
        assert tasks.escalate_overdue_reviews() == 0
    received, asking_email, reminder, told = smtp.delivered
    assert smtp.keys()[close_key(ticket.thread_id, question.decision_id)] == 1
    assert told.key == close_key(ticket.thread_id, question.decision_id)
    assert told.subject == "Su solicitud de reembolso del pedido 1042 está cerrada"
    assert "Could you send a photo of the damage?" in told.body
    assert "responda a este correo" in told.body
    # Threaded as the question is, and a reply to it finds the thread by the question's token.
    assert told.reply_to == asking_email.reply_to == f"replies+{question.token}@{REPLY_DOMAIN}"
    assert told.in_reply_to == asking_email.in_reply_to == "<late@customer.test>"
    assert question.message_id in told.references.split()
    assert told.message_id not in (asking_email.message_id, reminder.message_id)
    sent = Email.objects.get(key=told.key)
    assert sent.language == "es" and "reply to this email with your answer" in sent.desk_text
    # Closed: shown as such, in no queue, not counted as waiting on the customer.
    assert ticket.status == Ticket.Status.CLOSED
    assert ticket.pending_payload["kind"] == "closed"
    assert ticket.outcome_reason == "Closed: no reply from the customer."
    assert not Ticket.objects.awaiting().exists()
    assert not Ticket.objects.waiting_on_customers().exists()
    client.force_login(manager)
    page = client.get(f"/tickets/{ticket.pk}/").content.decode()
    assert "Closed: no reply from the customer" in page
    assert "the ticket is closed as no reply" in page  # the timeline says what the timer did
    assert "waiting on the customer, the longest" not in client.get("/dashboard/").content.decode()


def test_a_reply_by_the_webhook_after_the_close_reopens_the_same_thread_then_approve_refunds(
    transactional_db, settings, client, agent, colleague, late_order
):
    settings.REFUNDS_REVIEW_WARN_MINUTES, settings.REFUNDS_REVIEW_ESCALATE_MINUTES = 15, 60
    with time_machine.travel("2026-12-01 09:00 +0000", tick=True) as clock:
        ticket = waiting_review(late_order, colleague)
        question = asked(ticket, agent)
        closed(ticket, clock)
        clock.shift(timedelta(days=2))  # two days closed: no review clock runs meanwhile
        front = photo(seed="front")
        mime_text = reply_email(question, [("front.jpg", "image/jpeg", front)])
        assert post(client, mime_text).status_code == 200
        message = Message.objects.get()
        assert message.resumed_wait and message.ticket_id == ticket.pk
        [reply] = Decision.objects.filter(ticket=ticket, answer="reply")
        assert reply.interrupt_id != question.decision.interrupt_id
        assert runner.advance(ticket.pk) == "awaiting_review"
        assert tasks.escalate_overdue_reviews() == 0  # the closed days count for nothing
        ticket.refresh_from_db()
        assert not ticket.is_escalated and ticket.required_role == "agent"
        assert ticket.outcome_reason == ""
    assert Ticket.objects.count() == 1  # the same ticket, the same thread
    values = persistence.snapshot(ticket.thread_id).values
    trail = values["trail"]
    assert trail[trail.index("ask_customer") :] == [
        "ask_customer",
        "no_reply",
        "close_no_reply",
        "reply",
    ]
    assert "The customer replied:** “Here are the photos" in ticket.pending_payload["description"]
    [kept] = message.files.all()
    client.force_login(agent)
    card = client.get("/").content.decode()
    assert "the vase is in pieces" in card and f'<img src="/attachments/{kept.pk}/"' in card
    page = client.get(f"/tickets/{ticket.pk}/").content.decode()
    assert f'<img src="/attachments/{kept.pk}/"' in page
    assert "The customer replied after the close" in page
    decide(ticket, agent)
    assert runner.advance(ticket.pk) == "refunded"
    keys = list(Email.objects.filter(ticket=ticket).order_by("pk").values_list("key", flat=True))
    assert keys == [
        question.email_key,
        question.email_key + ":reminder",
        close_key(ticket.thread_id, question.decision_id),
        f"{ticket.thread_id}:email",
    ]


def test_a_reply_after_the_close_delivered_twice_reopens_once(
    transactional_db, agent, colleague, late_order
):
    with time_machine.travel("2026-12-01 09:00 +0000", tick=True) as clock:
        ticket = waiting_review(late_order, colleague)
        question = asked(ticket, agent)
        closed(ticket, clock)
        reply_in(question)
        reply_in(question)  # the same email again: one message
        assert Message.objects.count() == 1
        assert Decision.objects.filter(ticket=ticket, answer="reply").count() == 1
        assert runner.advance(ticket.pk) == "awaiting_review"


def test_two_replies_after_the_close_reopen_once_at_the_compare_and_set(
    transactional_db, agent, colleague, late_order
):
    """Both replies passed the early check on their copy of the question; the conditional
    UPDATE on `reopened_at` lets one in, the other is kept on the timeline with why."""
    with time_machine.travel("2026-12-01 09:00 +0000", tick=True) as clock:
        ticket = waiting_review(late_order, colleague)
        question = asked(ticket, agent)
        closed(ticket, clock)
        stale = CustomerQuestion.objects.get(pk=question.pk)
        first = asking.reply_record(question=question, sender="ana@example.com", text="one")
        second = asking.reply_record(question=stale, sender="ana@example.com", text="two")
        assert first.resumed and not second.resumed
        assert second.why == "the question was answered already; this reply is kept here"
        replies = Decision.objects.filter(answer="reply").values_list("reason", flat=True)
        assert list(replies) == ["one"]
        assert runner.advance(ticket.pk) == "awaiting_review"


def test_a_second_reply_after_the_reopened_thread_moved_on_goes_to_the_timeline(
    transactional_db, agent, colleague, late_order
):
    with time_machine.travel("2026-12-01 09:00 +0000", tick=True) as clock:
        ticket = waiting_review(late_order, colleague)
        question = asked(ticket, agent)
        closed(ticket, clock)
        reply_in(question)
        assert runner.advance(ticket.pk) == "awaiting_review"
        message = reply_in(question, key="<reply-2@customer.test>", body="And another photo.")
        assert message.ticket_id == ticket.pk and not message.resumed_wait
        assert Decision.objects.filter(answer="reply").count() == 1
        event = AuditEvent.objects.filter(ticket=ticket, action="reply").last()
        assert event is not None and not event.answer["resumed"]
        assert "answered already" in event.answer["why"]


def test_a_reply_from_another_address_after_the_close_reopens_nothing(
    transactional_db, agent, colleague, late_order
):
    with time_machine.travel("2026-12-01 09:00 +0000", tick=True) as clock:
        ticket = waiting_review(late_order, colleague)
        question = asked(ticket, agent)
        closed(ticket, clock)
        message = reply_in(question, sender="mallory@example.com")
        assert message.ticket_id == ticket.pk and not message.resumed_wait
        assert not Decision.objects.filter(answer="reply").exists()
        assert runner.advance(ticket.pk) == "closed"


def test_a_closed_ticket_keeps_its_order_and_gets_no_reminder(
    transactional_db, agent, colleague, late_order
):
    """Closed for want of a reply is not finished: a second ticket for the order is refused
    (the reply reopens the first), and the reminder timer leaves it alone."""
    with time_machine.travel("2026-12-01 09:00 +0000", tick=True) as clock:
        ticket = waiting_review(late_order, colleague)
        asked(ticket, agent)
        closed(ticket, clock)
        clock.shift(timedelta(days=30))
        assert tasks.escalate_overdue_reviews() == 0
        with pytest.raises(services.RefundError, match="open ticket"):
            services.ticket_open(order_number=late_order.number, opened_by=colleague)


def closed_undelivered(ticket: Ticket, clock, smtp) -> Email:
    """Closed as `closed` does, with the mail server refusing the close email's address: the
    ticket closes all the same, and the email waits undelivered."""
    clock.shift(timedelta(days=3, minutes=1))
    assert tasks.escalate_overdue_reviews() == 1  # the reminder
    clock.shift(timedelta(days=4))
    assert tasks.escalate_overdue_reviews() == 1  # the give-up
    smtp.refuse(1, code=550)
    assert runner.advance(ticket.pk) == "closed"
    smtp.accept()
    row = Email.objects.get(key__endswith=":closed")
    assert row.status != Email.Status.SENT
    return row


def test_an_admin_resends_the_undelivered_close_email_while_the_ticket_stays_closed(
    transactional_db, smtp, client, agent, colleague, admin_user, late_order
):
    with time_machine.travel("2026-12-01 09:00 +0000", tick=True) as clock:
        ticket = waiting_review(late_order, colleague)
        asked(ticket, agent)
        row = closed_undelivered(ticket, clock, smtp)
        client.force_login(admin_user)
        page = client.get(f"/tickets/{ticket.pk}/").content.decode()
        assert "not delivered" in page
        assert reverse("ops:resend", args=[row.pk]) in page
        services.email_resend(email_id=row.pk, by=admin_user)
        assert mail.resend(row.pk) is True
    assert smtp.keys()[row.key] == 1


def test_the_close_email_is_never_resent_once_a_reply_reopened_the_ticket(
    transactional_db, smtp, client, agent, colleague, admin_user, late_order
):
    """It says the ticket is closed and that replying reopens it: untrue after the reply. The
    guard holds where the row is claimed: a Resend decided before the reply (its task still in
    the broker) sends nothing once the reply is recorded, before a worker reopened the ticket
    (its status still says closed), and nothing after the ticket ended."""
    with time_machine.travel("2026-12-01 09:00 +0000", tick=True) as clock:
        ticket = waiting_review(late_order, colleague)
        question = asked(ticket, agent)
        row = closed_undelivered(ticket, clock, smtp)
        reply_in(question)
        ticket.refresh_from_db()
        assert ticket.status == Ticket.Status.CLOSED  # no worker reopened it yet
        with pytest.raises(services.RefundError, match="reply reopened it"):
            services.email_resend(email_id=row.pk, by=admin_user)
        assert mail.resend(row.pk) is False
        assert runner.advance(ticket.pk) == "awaiting_review"
        ticket.refresh_from_db()
        decide(ticket, agent)
        assert runner.advance(ticket.pk) == "refunded"
        with pytest.raises(services.RefundError, match="reply reopened it"):
            services.email_resend(email_id=row.pk, by=admin_user)
        assert mail.resend(row.pk) is False
        client.force_login(admin_user)
        page = client.get(f"/tickets/{ticket.pk}/").content.decode()
        assert reverse("ops:resend", args=[row.pk]) not in page
        assert row.pk not in {email.pk for email, _ in ops_selectors.undelivered()}
    assert smtp.keys()[row.key] == 0
    assert smtp.keys()[f"{ticket.thread_id}:email"] == 1
