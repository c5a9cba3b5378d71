"""Asking the customer: a reviewer asks instead of deciding, the thread waits on the customer, the
question goes out once with a reply address carrying its token, and the customer's reply (by
the inbound webhook's path, message_receive) resumes the same thread once; the review comes back
to the same queue with the reply quoted. A reply that may not resume it resumes nothing and says
why."""

from __future__ import annotations

import hashlib
import hmac
import io
import json
import time
import uuid
from datetime import timedelta

import pytest
import time_machine
from django.core import mail
from django.core.management import call_command
from django.db import transaction
from django.test import Client
from django.utils import timezone

from api.models import ApiToken
from intake.models import Message
from intake.services import message_receive
from intake.sorting import SortingError, message_send_back
from ops import selectors as ops_selectors
from refunds import emails, enqueue, persistence, runner, services, tasks
from refunds import mail as refunds_mail
from refunds.models import AuditEvent, CannedReason, CustomerQuestion, Decision, Email, Ticket
from refunds.services import asking
from tests.reviewing import decide

REPLY_DOMAIN = "desk.example.com"
WEBHOOK_KEY = "inbound-signing-key"


@pytest.fixture(autouse=True)
def no_broker(monkeypatch, settings):
    """The test runs the threads itself; no worker is asked."""
    monkeypatch.setattr(enqueue, "send", lambda name, pk: True)
    settings.REFUNDS_REPLY_ADDRESS = "replies+{token}@" + REPLY_DOMAIN


def waiting_review(order, opener) -> Ticket:
    ticket = services.ticket_open(order_number=order.number, opened_by=opener)
    assert runner.advance(ticket.pk) == "awaiting_review"
    ticket.refresh_from_db()
    return ticket


def ask(ticket: Ticket, reviewer, question: str = "", canned: CannedReason | None = None):
    return services.ticket_ask(
        ticket=ticket,
        interrupt_id=ticket.pending_interrupt_id,
        reviewer=reviewer,
        question=question,
        canned=canned,
    )


def asked(ticket: Ticket, reviewer, question: str = "Could you send a photo of the damage?"):
    ask(ticket, reviewer, question)
    assert runner.advance(ticket.pk) == "awaiting_customer"
    ticket.refresh_from_db()
    return CustomerQuestion.objects.get(ticket=ticket)


def reply_in(
    question: CustomerQuestion | None,
    *,
    body: str = "Here is the photo: the vase is in pieces.",
    sender: str = "ana@example.com",
    key: str = "<reply-1@customer.test>",
    to: list[str] | None = None,
    references: list[str] | None = None,
) -> Message:
    recipients = to if to is not None else [asking_address(question)]
    message, _ = message_receive(
        channel="email",
        key=key,
        message_id=key,
        sender=sender,
        subject="Re: A question about your refund request",
        body=body,
        received_at=timezone.now(),
        raw=body,
        recipients=recipients,
        references=references or [],
    )
    message.refresh_from_db()
    return message


def hand_in(api: Client, body: dict):
    """A helpdesk hands a message in through the API."""
    return api.post(
        "/api/messages/",
        data=json.dumps(body),
        content_type="application/json",
        headers={"Idempotency-Key": "reply-1"},
    )


def asking_address(question: CustomerQuestion | None) -> str:
    assert question is not None
    return f"replies+{question.token}@{REPLY_DOMAIN}"


def test_a_reviewer_asks_the_customer_and_the_review_leaves_the_queue(
    transactional_db, client, agent, colleague, late_order
):
    ticket = waiting_review(late_order, colleague)
    question = asked(ticket, agent)
    assert ticket.status == Ticket.Status.AWAITING_CUSTOMER
    assert ticket.pending_payload["kind"] == "customer"
    assert ticket.pending_payload["ask_id"] == question.decision_id
    assert Decision.objects.get(pk=question.decision_id).answer == "ask"
    assert len(question.token) == 32 and question.text == "Could you send a photo of the damage?"
    assert not Ticket.objects.for_agents().exists() and not Ticket.objects.for_managers().exists()
    client.force_login(agent)
    queue = client.get("/").content.decode()  # the asker sees the line that took its place
    assert "Asked the customer about order 1042; the review comes back with their reply" in queue
    page = client.get(f"/tickets/{ticket.pk}/").content.decode()
    assert "Waiting on the customer since" in page
    assert "Could you send a photo of the damage?" in page


def test_the_question_goes_out_once_threaded_with_a_reply_address_carrying_its_token(
    transactional_db, agent, colleague, late_order
):
    ticket = waiting_review(late_order, colleague)
    question = asked(ticket, agent)
    [sent] = mail.outbox
    assert sent.to == ["ana@example.com"]
    assert sent.reply_to == [f"replies+{question.token}@{REPLY_DOMAIN}"]
    assert sent.subject == "A question about your refund request for order 1042"
    assert "Could you send a photo of the damage?" in sent.body
    assert sent.extra_headers["Message-ID"] == question.message_id
    assert Email.objects.get(key=question.email_key).status == Email.Status.SENT
    # Run again (a redelivered task, the sweep): the thread waits, nothing is sent again.
    assert runner.advance(ticket.pk) == "awaiting_customer"
    assert len(mail.outbox) == 1


def test_the_reply_resumes_the_thread_once_and_the_review_comes_back_with_it_quoted(
    transactional_db, client, agent, colleague, late_order
):
    ticket = waiting_review(late_order, colleague)
    question = asked(ticket, agent)
    message = reply_in(question)
    assert message.ticket_id == ticket.pk and message.status == Message.Status.ADDED
    assert message.finished_at is not None  # no intake: no second ticket, no acknowledgment
    [reply] = Decision.objects.filter(ticket=ticket, answer="reply")
    assert reply.reviewer is None and reply.reason.startswith("Here is the photo")
    assert runner.advance(ticket.pk) == "awaiting_review"
    ticket.refresh_from_db()
    assert ticket.required_role == "agent"
    assert "The customer replied:** “Here is the photo" in ticket.pending_payload["description"]
    client.force_login(agent)
    assert [t.pk for t in client.get("/").context["reviews"]] == [ticket.pk]
    assert "the vase is in pieces" in client.get("/").content.decode()
    assert "the vase is in pieces" in client.get(f"/tickets/{ticket.pk}/").content.decode()
    decide(ticket, agent)
    assert runner.advance(ticket.pk) == "refunded"
    assert len(mail.outbox) == 2  # the question, then the refund's confirmation


def test_the_replys_page_and_its_path_name_the_order_it_answers_about(
    transactional_db, client, agent, colleague, late_order
):
    ticket = waiting_review(late_order, colleague)
    message = reply_in(asked(ticket, agent))
    client.force_login(agent)

    page = client.get(f"/messages/{message.pk}/").content.decode()
    path = client.get(f"/messages/{message.pk}/history/").content.decode()

    link = f'<a href="/tickets/{ticket.pk}/">ticket {ticket.pk}</a> for order {late_order.number}.'
    assert f"A reply to the question on\n        {link}" in page
    assert f"a reply to the question on {link}" in path


def test_a_reply_by_its_thread_headers_alone_resumes_the_thread(
    transactional_db, agent, colleague, late_order
):
    ticket = waiting_review(late_order, colleague)
    question = asked(ticket, agent)
    reply_in(None, to=["refunds@example.com"], references=["<x@y>", question.message_id])
    assert Decision.objects.filter(ticket=ticket, answer="reply").count() == 1


def test_a_reply_delivered_twice_resumes_once(transactional_db, agent, colleague, late_order):
    ticket = waiting_review(late_order, colleague)
    question = asked(ticket, agent)
    reply_in(question)
    reply_in(question)  # the same email again: one message
    assert Message.objects.count() == 1
    assert Decision.objects.filter(ticket=ticket, answer="reply").count() == 1


def test_two_replies_at_once_resume_once_at_the_compare_and_set(
    transactional_db, agent, colleague, late_order
):
    """Both replies passed the early check on their copy of the question; the conditional
    UPDATE lets one in, the other is kept on the timeline with why."""
    ticket = waiting_review(late_order, colleague)
    question = asked(ticket, agent)
    stale = CustomerQuestion.objects.get(pk=question.pk)
    first = asking.reply_record(question=question, sender="ana@example.com", text="one")
    second = asking.reply_record(question=stale, sender="ana@example.com", text="two")
    assert first.resumed and not second.resumed
    assert second.why == "the question was answered already; this reply is kept here"
    assert list(Decision.objects.filter(answer="reply").values_list("reason", flat=True)) == ["one"]
    assert runner.advance(ticket.pk) == "awaiting_review"


def test_a_reply_from_another_address_resumes_nothing_and_goes_to_the_timeline(
    transactional_db, client, agent, colleague, late_order
):
    ticket = waiting_review(late_order, colleague)
    question = asked(ticket, agent)
    message = reply_in(question, sender="mallory@example.com")
    assert message.ticket_id == ticket.pk
    assert not Decision.objects.filter(answer="reply").exists()
    event = AuditEvent.objects.get(ticket=ticket, action="reply")
    assert "not from the customer's address ana@example.com" in event.answer["why"]
    assert runner.advance(ticket.pk) == "awaiting_customer"
    client.force_login(agent)
    page = client.get(f"/tickets/{ticket.pk}/").content.decode()
    assert "resumed nothing" in page and "mallory@example.com" in page


def test_a_reply_with_a_forged_token_goes_to_needs_sorting_saying_why(
    transactional_db, agent, colleague, late_order
):
    ticket = waiting_review(late_order, colleague)
    asked(ticket, agent)
    message = reply_in(None, to=[f"replies+{'0' * 32}@{REPLY_DOMAIN}"])
    assert message.status == Message.Status.NEEDS_SORTING
    assert "matches no question" in message.sorting_reason
    assert message.ticket_id is None and message.finished_at is not None
    assert not Decision.objects.filter(answer="reply").exists()


def test_a_second_reply_after_the_thread_moved_on_resumes_nothing(
    transactional_db, agent, colleague, late_order
):
    ticket = waiting_review(late_order, colleague)
    question = asked(ticket, agent)
    reply_in(question)
    assert runner.advance(ticket.pk) == "awaiting_review"
    message = reply_in(question, key="<reply-2@customer.test>", body="And another photo.")
    assert message.ticket_id == ticket.pk
    assert Decision.objects.filter(answer="reply").count() == 1
    event = AuditEvent.objects.filter(ticket=ticket, action="reply").last()
    assert event is not None and not event.answer["resumed"]
    assert "answered already" in event.answer["why"]


def on_its_way(ticket: Ticket, reviewer) -> CustomerQuestion:
    """The reviewer asked, and the thread is running on to its wait: the runner's UPDATE as it
    resumes the review with the ask (refunds/runner.py), before the run sends the question and
    reaches the wait. The mail server took the question in that run; the reply can come now."""
    ask(ticket, reviewer, "Could you send a photo of the damage?")
    Ticket.objects.filter(pk=ticket.pk).update(
        status=Ticket.Status.RUNNING, pending_interrupt_id="", pending_payload=None
    )
    return CustomerQuestion.objects.get(ticket=ticket)


def test_a_reply_that_comes_before_the_thread_waits_is_kept_and_resumes_the_wait_once(
    transactional_db, agent, colleague, late_order
):
    """Issue 44 item 4: the question is in the customer's mailbox from the mail server's "."; the
    thread waits only after the sent mark and its next step. A reply in that gap is kept, and
    the recovery sweep applies it once the thread waits on the question: once, whatever runs."""
    ticket = waiting_review(late_order, colleague)
    question = on_its_way(ticket, agent)
    message = reply_in(question)
    assert (message.ticket_id, message.sorting_reason, message.resumed_wait) == (
        ticket.pk,
        "",
        True,
    )
    assert not Decision.objects.filter(answer="reply").exists()
    assert services.tickets_recover() == [] and not Decision.objects.filter(answer="reply")
    assert runner.advance(ticket.pk) == "awaiting_customer"  # the run reaches its wait
    services.tickets_recover()  # beat's next sweep
    services.tickets_recover()
    [reply] = Decision.objects.filter(ticket=ticket, answer="reply")
    assert reply.reason == "Here is the photo: the vase is in pieces."
    assert runner.advance(ticket.pk) == "awaiting_review"
    ticket.refresh_from_db()
    assert "The customer replied:** “Here is the photo" in ticket.pending_payload["description"]
    assert asking.replies_kept_apply() == []
    assert asking.questions_wait_timers(now=timezone.now() + timedelta(days=30)) == {
        "ended": [],
        "reminded": [],
    }
    assert len(mail.outbox) == 1  # the question; no reminder of a question answered


def test_of_two_replies_before_the_wait_the_first_is_kept_and_answers_it(
    transactional_db, agent, colleague, late_order
):
    """The keep is a compare-and-set on the question: a second early reply (or the first one
    delivered again) does not take its place, and a reply after the wait does not jump it."""
    ticket = waiting_review(late_order, colleague)
    question = on_its_way(ticket, agent)
    reply_in(question)
    second = reply_in(question, key="<reply-2@customer.test>", body="And another photo.")
    assert "answered already" in second.sorting_reason
    assert runner.advance(ticket.pk) == "awaiting_customer"
    third = reply_in(question, key="<reply-3@customer.test>", body="Did you get my photo?")
    assert "answered already" in third.sorting_reason  # the kept reply answers first
    [reply] = Decision.objects.filter(ticket=ticket, answer="reply")
    assert reply.reason == "Here is the photo: the vase is in pieces."
    assert asking.replies_kept_apply() == []


def test_the_canned_questions_are_seeded_beside_the_canned_replies(db):
    assert list(CannedReason.objects.asking().values_list("text", flat=True)) == [
        "Could you send a photo of the damage?",
        "Which item is missing?",
        "Which order do you mean?",
    ]


def test_a_canned_question_is_asked_with_words_of_ones_own(
    transactional_db, agent, colleague, late_order
):
    photo = CannedReason.objects.create(
        title="Photo", text="Could you send a photo of the damage?", use="ask"
    )
    reply = CannedReason.objects.create(title="Late", text="Not late.", use="reject")
    ticket = waiting_review(late_order, colleague)
    with pytest.raises(services.RefundError, match="not a question"):
        ask(ticket, agent, "x", canned=reply)
    ask(ticket, agent, "It helps us decide.", canned=photo)
    assert Decision.objects.get(answer="ask").reason == (
        "Could you send a photo of the damage? It helps us decide."
    )


@pytest.mark.parametrize(
    ("kwargs", "error"),
    [
        ({"question": ""}, "Write the question"),
        ({"question": "x" * 2001}, "too long"),
    ],
)
def test_a_bad_question_is_refused_and_changes_nothing(
    transactional_db, agent, colleague, late_order, kwargs, error
):
    ticket = waiting_review(late_order, colleague)
    with pytest.raises(services.RefundError, match=error):
        services.ticket_ask(
            ticket=ticket, interrupt_id=ticket.pending_interrupt_id, reviewer=agent, **kwargs
        )
    assert not Decision.objects.exists() and not CustomerQuestion.objects.exists()


def test_a_review_paused_under_version_6_is_carried_to_version_7_and_asked(
    transactional_db, agent, colleague, late_order, monkeypatch
):
    real_input = runner.initial_input
    monkeypatch.setattr(
        runner, "initial_input", lambda lease: real_input(lease) | {"flow_version": 6}
    )
    monkeypatch.setattr(runner, "FLOW_VERSION", 6)
    ticket = waiting_review(late_order, colleague)
    assert persistence.snapshot(ticket.thread_id).values["flow_version"] == 6
    monkeypatch.undo()  # the release of version 7
    assert ticket.flow_version == 6
    call_command("upgrade_threads", stdout=io.StringIO())
    carried = Ticket.objects.get(pk=ticket.pk)
    assert carried.flow_version == 7 and carried.status == "awaiting_review"
    assert carried.pending_interrupt_id == ticket.pending_interrupt_id  # the same review
    question = asked(ticket, agent)
    assert persistence.snapshot(ticket.thread_id).values["flow_version"] == 7
    reply_in(question)
    assert runner.advance(ticket.pk) == "awaiting_review"
    ticket.refresh_from_db()
    decide(ticket, agent)
    assert runner.advance(ticket.pk) == "refunded"


@pytest.mark.parametrize(
    ("language", "words"),
    [
        ("es", "Una pregunta sobre su solicitud de reembolso del pedido 1042"),
        ("de", "Eine Frage zu Ihrem Erstattungsantrag für die Bestellung 1042"),
        ("fr", "Une question sur votre demande de remboursement pour la commande 1042"),
        ("pt", "Uma pergunta sobre o seu pedido de reembolso da encomenda 1042"),
        ("it", "Una domanda sulla sua richiesta di rimborso per l'ordine 1042"),
    ],
)
def test_the_question_is_worded_in_the_customers_language(language, words):
    facts = {"customer_name": "Ana", "orders": ["1042"], "question": "¿Foto?"}
    worded = emails.word("question", facts, language)
    assert worded.subject == words
    assert "¿Foto?" in worded.body and "Before we can decide" in worded.desk_text


def mailgun_post(client, mime_text: str, recipient: str):
    """A signed post of Mailgun's raw-MIME route, as tests/test_inbound_webhook.py signs them."""
    timestamp, token = str(int(time.time())), uuid.uuid4().hex
    signature = hmac.new(
        WEBHOOK_KEY.encode(), f"{timestamp}{token}".encode(), hashlib.sha256
    ).hexdigest()
    fields = {"body-mime": mime_text, "recipient": recipient}
    fields |= {"timestamp": timestamp, "token": token, "signature": signature}
    return client.post("/mail/mailgun/inbound_mime/", fields)


def test_a_reply_through_the_inbound_webhook_finds_its_thread_by_the_reply_address(
    transactional_db, client, settings, agent, colleague, late_order
):
    """The customer changed the subject and their mail client dropped the thread headers: the
    token in the address they replied to still finds the thread."""
    settings.ANYMAIL = {"MAILGUN_WEBHOOK_SIGNING_KEY": WEBHOOK_KEY}
    ticket = waiting_review(late_order, colleague)
    question = asked(ticket, agent)
    address = asking_address(question)
    mime_text = (
        "From: Ana Souza <ana@example.com>\r\n"
        f"To: {address}\r\n"
        "Subject: photo\r\n"
        "Message-ID: <r1@mail.example.com>\r\n"
        "Content-Type: text/plain; charset=utf-8\r\n"
        "\r\n"
        "The vase arrived in three pieces.\r\n"
    )
    assert mailgun_post(client, mime_text, address).status_code == 200
    message = Message.objects.get()
    assert message.ticket_id == ticket.pk and message.status == Message.Status.ADDED
    assert runner.advance(ticket.pk) == "awaiting_review"
    ticket.refresh_from_db()
    assert "The vase arrived in three pieces." in ticket.pending_payload["description"]
    assert Ticket.objects.count() == 1  # no second ticket from the reply


def reply_mime(*, to: str, references: str = "") -> str:
    return (
        f"From: Ana Souza <ana@example.com>\r\nTo: {to}\r\nSubject: photo\r\n"
        f"Message-ID: <r2@mail.example.com>\r\nReferences: {references}\r\n"
        "Content-Type: text/plain; charset=utf-8\r\n\r\nThe vase arrived in three pieces.\r\n"
    )


def test_a_reply_naming_70000_message_ids_finds_its_question_among_the_last_ones_read(
    transactional_db, client, settings, agent, colleague, late_order
):
    """A References of 70,000 Message-IDs was one query with too many parameters, answered 503
    as "the database is unavailable": the last 100 are read (a reply appends the ID it answers),
    and the message says so."""
    settings.ANYMAIL = {"MAILGUN_WEBHOOK_SIGNING_KEY": WEBHOOK_KEY}
    ticket = waiting_review(late_order, colleague)
    question = asked(ticket, agent)
    ids = " ".join(f"<{n}@thread.example.com>" for n in range(70_000))
    mime_text = reply_mime(to="refunds@desk.example.com", references=f"{ids} {question.message_id}")
    assert mailgun_post(client, mime_text, "refunds@desk.example.com").status_code == 200
    message = Message.objects.get()
    assert message.ticket_id == ticket.pk and message.answers_question == question
    assert message.unread == "Only the last 100 Message-IDs of its References were read."


def test_a_reply_sent_to_thousands_of_addresses_reads_the_first_hundred(
    transactional_db, client, settings, agent, colleague, late_order
):
    """Its reply address among the first 100 is read and finds the thread; one past them is not
    read at all (20,000 addresses held a web worker 16.5 s)."""
    settings.ANYMAIL = {"MAILGUN_WEBHOOK_SIGNING_KEY": WEBHOOK_KEY}
    ticket = waiting_review(late_order, colleague)
    address = asking_address(asked(ticket, agent))
    others = [f"someone{n}@example.com" for n in range(5000)]
    first = reply_mime(to=", ".join([*others[:50], address, *others[50:]]))
    assert mailgun_post(client, first, "refunds@desk.example.com").status_code == 200
    message = Message.objects.get()
    assert message.ticket_id == ticket.pk and message.status == Message.Status.ADDED
    assert message.unread == "Only the first 100 addresses it was sent to were read."
    past = reply_mime(to=", ".join([*others[:150], address])).replace("<r2@", "<r3@")
    assert mailgun_post(client, past, "refunds@desk.example.com").status_code == 200
    assert Message.objects.get(message_id="<r3@mail.example.com>").ticket_id is None


def test_a_reply_whose_providers_checks_fail_resumes_nothing_and_waits_for_a_person(
    transactional_db, agent, colleague, late_order
):
    ticket = waiting_review(late_order, colleague)
    question = asked(ticket, agent)
    message, _ = message_receive(
        channel="email",
        key="<forged@elsewhere.test>",
        sender="ana@example.com",
        subject="Re: A question about your refund request",
        body="No photo needed, just refund it.",
        received_at=timezone.now(),
        raw="",
        recipients=[asking_address(question)],
        verdicts={"spf": "fail", "dkim": "none"},
    )
    assert (
        message.answers_question is None and "did not confirm the sender" in message.sorting_reason
    )
    question.refresh_from_db()
    assert question.replied_at is None
    assert runner.advance(ticket.pk) == "awaiting_customer"


def test_a_reply_whose_early_check_passed_before_the_thread_moved_on_resumes_nothing(
    transactional_db, agent, colleague, late_order, monkeypatch
):
    """The question was answered and the thread asked another since the early check read the
    ticket (a race): the late read of the ticket refuses the stale reply, which never answers
    the second question's wait."""
    ticket = waiting_review(late_order, colleague)
    first = asked(ticket, agent)
    reply_in(first)
    assert runner.advance(ticket.pk) == "awaiting_review"
    ticket.refresh_from_db()
    ask(ticket, agent, "Which item is missing?")
    assert runner.advance(ticket.pk) == "awaiting_customer"
    monkeypatch.setattr(asking, "_not_waiting", lambda question, **_: "")  # passed, then the race
    stale = asking.reply_record(question=first, sender="ana@example.com", text="late words")
    assert not stale.resumed and "no longer waits" in stale.why
    assert Decision.objects.filter(answer="reply").count() == 1


def test_an_unanswered_question_is_reminded_once_then_comes_back_without_a_reply(
    transactional_db, settings, agent, colleague, late_order
):
    settings.REFUNDS_ASK_REMIND_DAYS, settings.REFUNDS_ASK_GIVE_UP_DAYS = 3, 7
    with time_machine.travel("2026-12-01 09:00 +0000", tick=True) as clock:
        ticket = waiting_review(late_order, colleague)
        question = asked(ticket, agent)
        assert tasks.escalate_overdue_reviews() == 0
        clock.shift(timedelta(days=3, minutes=1))
        assert tasks.escalate_overdue_reviews() == 1
        assert tasks.escalate_overdue_reviews() == 0  # once per question, not every beat
        [_, reminder] = mail.outbox
        assert reminder.reply_to == [asking_address(question)]
        assert "We have not heard from you yet" in reminder.body
        assert reminder.extra_headers["In-Reply-To"] == question.message_id
        clock.shift(timedelta(days=4))  # 7 days and a minute
        assert tasks.escalate_overdue_reviews() == 1
        assert tasks.escalate_overdue_reviews() == 0
        assert runner.advance(ticket.pk) == "awaiting_review"
        ticket.refresh_from_db()
        assert "**The customer did not reply.**" in ticket.pending_payload["description"]
        late = reply_in(question, body="Sorry, I was away.")
        assert late.ticket_id == ticket.pk
        assert Decision.objects.filter(answer="reply").count() == 0
        assert len(mail.outbox) == 2


def test_two_timer_runs_on_one_stale_read_write_one_reminder_and_neither_aborts(
    transactional_db, settings, agent, colleague, late_order
):
    """Two timer runs (a slow beat and the next) both read the question as not reminded yet,
    before either marked it; the question still waits, so the early check passes on both
    copies. The compare-and-set on `reminded_at` lets one write the reminder: the other writes
    nothing and returns, rather than meeting the outbox's UNIQUE key and aborting its run."""
    settings.REFUNDS_ASK_REMIND_DAYS, settings.REFUNDS_ASK_GIVE_UP_DAYS = 3, 7
    with time_machine.travel("2026-12-01 09:00 +0000", tick=True) as clock:
        ticket = waiting_review(late_order, colleague)
        question = asked(ticket, agent)
        clock.shift(timedelta(days=3, minutes=1))
        read_by_one, read_by_the_other = (
            CustomerQuestion.objects.select_related("ticket__order").get(pk=question.pk)
            for _ in range(2)
        )
        now = timezone.now()
        with transaction.atomic():  # each run writes a question's reminder in its own
            assert asking._reminder_written(read_by_one, now) is True
        with transaction.atomic():
            assert asking._reminder_written(read_by_the_other, now) is False
        key = question.email_key + asking.REMINDER_SUFFIX
        assert Email.objects.filter(key=key).count() == 1
        said = AuditEvent.objects.filter(ticket=ticket, action=AuditEvent.Action.ASK)
        assert [bool(event.answer.get("reminder")) for event in said.order_by("pk")] == [
            False,
            True,
        ]
        assert tasks.escalate_overdue_reviews() == 0  # delivers the one reminder, writes none
    [_, reminder] = mail.outbox
    assert "We have not heard from you yet" in reminder.body


def test_a_reply_and_the_give_up_at_once_resume_the_wait_once(
    transactional_db, settings, agent, colleague, late_order
):
    """The timer read the question as unanswered before the reply landed: its compare-and-set
    on the question refuses it, and the reply stands."""
    with time_machine.travel("2026-12-01 09:00 +0000", tick=True) as clock:
        ticket = waiting_review(late_order, colleague)
        question = asked(ticket, agent)
        clock.shift(timedelta(days=8))
        stale = CustomerQuestion.objects.get(pk=question.pk)
        assert asking.reply_record(question=question, sender="ana@example.com", text="yes").resumed
        with pytest.raises(asking._NotRecorded, match="answered already"):
            asking._record(stale, "", {"by": "timer"}, timezone.now(), answer="no_reply")
        assert list(Decision.objects.filter(ticket=ticket).values_list("answer", flat=True)) == [
            "ask",
            "reply",
        ]


def test_time_waiting_on_the_customer_does_not_count_toward_the_review_escalation(
    transactional_db, settings, agent, colleague, late_order
):
    settings.REFUNDS_REVIEW_WARN_MINUTES, settings.REFUNDS_REVIEW_ESCALATE_MINUTES = 15, 60
    with time_machine.travel("2026-12-01 09:00 +0000", tick=True) as clock:
        ticket = waiting_review(late_order, colleague)
        clock.shift(timedelta(minutes=50))
        question = asked(ticket, agent)
        clock.shift(timedelta(hours=5))  # five hours waiting on the customer
        assert tasks.escalate_overdue_reviews() == 0
        reply_in(question)
        assert runner.advance(ticket.pk) == "awaiting_review"
        assert tasks.escalate_overdue_reviews() == 0  # the review's clock starts again
        ticket.refresh_from_db()
        assert not ticket.is_escalated
        clock.shift(timedelta(minutes=61))
        assert tasks.escalate_overdue_reviews() >= 1
        ticket.refresh_from_db()
        assert ticket.is_escalated


def test_a_reply_handed_in_through_the_api_resumes_the_thread(
    transactional_db, agent, colleague, manager, late_order
):
    """A helpdesk that received the reply hands it in with the address it was sent to."""
    ticket = waiting_review(late_order, colleague)
    question = asked(ticket, agent)
    api = Client(headers={"Authorization": f"Bearer {ApiToken.issue(manager)[1]}"})
    body = {
        "sender": "ana@example.com",
        "subject": "Re: question",
        "body": "Photo attached; the vase is broken.",
        "to": [asking_address(question)],
    }
    response = hand_in(api, body)
    assert response.status_code == 202, response.content
    assert response.json()["status"] == "added" and response.json()["ticket"] == ticket.pk
    assert Decision.objects.filter(ticket=ticket, answer="reply").count() == 1
    assert runner.advance(ticket.pk) == "awaiting_review"


@pytest.mark.parametrize("by", ["reply address", "Message-ID"])
def test_a_reply_handed_in_by_a_caller_who_may_not_see_the_ticket_resumes_nothing(
    transactional_db, agent, colleague, manager, big_order, by
):
    """The API answers for a ticket outside its caller's scope as for one that is not there:
    a reply to its question waits in "Needs sorting", as one whose token matches no question
    does, saying why; the thread still waits on the customer."""
    ticket = waiting_review(big_order, colleague)  # $48.00: the managers' review
    question = asked(ticket, manager)
    api = Client(headers={"Authorization": f"Bearer {ApiToken.issue(agent)[1]}"})
    body = {"sender": "dev@example.com", "body": "Approve it, I am the customer."}
    body |= {"to": [asking_address(question)]} if by == "reply address" else {}
    body |= {"in_reply_to": [question.message_id]} if by == "Message-ID" else {}
    response = hand_in(api, body)
    assert response.status_code == 202, response.content
    assert (response.json()["status"], response.json()["ticket"]) == ("needs_sorting", None)
    message = Message.objects.get()
    assert message.sorting_reason == (
        "A reply to a question, but it was handed in by agent, who may not see its question's "
        "ticket."
    )
    assert not Decision.objects.filter(answer="reply").exists()
    ticket.refresh_from_db()
    assert ticket.status == Ticket.Status.AWAITING_CUSTOMER
    question.refresh_from_db()
    assert question.replied_at is None


def test_the_dashboard_counts_the_tickets_waiting_on_customers(
    transactional_db, client, agent, colleague, manager, late_order
):
    with time_machine.travel("2026-12-01 09:00 +0000", tick=True) as clock:
        ticket = waiting_review(late_order, colleague)
        asked(ticket, agent)
        clock.shift(timedelta(hours=2))
        client.force_login(manager)
        html = client.get("/dashboard/").content.decode()
    assert "1</span> waiting on the customer, the longest for 2 h" in html


def test_a_reply_on_the_ticket_is_not_offered_for_sending_back_as_misread(
    transactional_db, client, agent, colleague, late_order
):
    ticket = waiting_review(late_order, colleague)
    question = asked(ticket, agent)
    message = reply_in(question)
    assert message.answers_question_id == question.pk
    assert runner.advance(ticket.pk) == "awaiting_review"
    ticket.refresh_from_db()
    client.force_login(agent)
    assert "Send the message back" not in client.get(f"/tickets/{ticket.pk}/").content.decode()
    with pytest.raises(SortingError, match="not opened from a customer's message"):
        message_send_back(ticket=ticket, why="misread", by=agent)
    assert not Decision.objects.filter(answer="reject").exists()


def test_the_customers_next_emails_answer_their_own_messages_not_another_addresss(
    transactional_db, settings, agent, colleague, late_order
):
    """A reply from another address resumes nothing and stays on the ticket's timeline: the
    reminder and the outcome the customer gets are threaded with what they saw and wrote, never
    "In-Reply-To" a message of someone else's."""
    settings.REFUNDS_ASK_REMIND_DAYS, settings.REFUNDS_ASK_GIVE_UP_DAYS = 3, 7
    with time_machine.travel("2026-12-01 09:00 +0000", tick=True) as clock:
        ticket = waiting_review(late_order, colleague)
        question = asked(ticket, agent)
        reply_in(question, sender="mallory@example.com", key="<mallory@elsewhere.test>")
        clock.shift(timedelta(days=3, minutes=1))
        assert tasks.escalate_overdue_reviews() == 1
        [_, reminder] = mail.outbox
        assert reminder.extra_headers["In-Reply-To"] == question.message_id
        assert "<mallory@elsewhere.test>" not in reminder.extra_headers["References"]
        reply_in(question, key="<ana-reply@customer.test>")
        assert runner.advance(ticket.pk) == "awaiting_review"
        ticket.refresh_from_db()
        decide(ticket, agent)
        assert runner.advance(ticket.pk) == "refunded"
    outcome = mail.outbox[-1]
    assert outcome.extra_headers["In-Reply-To"] == "<ana-reply@customer.test>"
    assert "<mallory@elsewhere.test>" not in outcome.extra_headers["References"]


def test_the_timeline_says_the_customer_was_reminded_of_the_question(
    transactional_db, settings, client, agent, colleague, late_order
):
    settings.REFUNDS_ASK_REMIND_DAYS, settings.REFUNDS_ASK_GIVE_UP_DAYS = 3, 7
    with time_machine.travel("2026-12-01 09:00 +0000", tick=True) as clock:
        ticket = waiting_review(late_order, colleague)
        asked(ticket, agent)
        clock.shift(timedelta(days=3, minutes=1))
        assert tasks.escalate_overdue_reviews() == 1
        client.force_login(agent)
        page = client.get(f"/tickets/{ticket.pk}/").content.decode()
    said = "The desk reminded the customer of the question: “Could you send a photo of the damage?”"
    assert said in page
    assert "asked the customer: “”" not in page


def test_a_reminder_the_mail_server_refused_is_never_sent_once_the_customer_replied(
    transactional_db, settings, smtp, agent, colleague, admin_user, late_order
):
    """ "We have not heard from you yet" is untrue after the reply: the timer's next delivery of
    a reminder the mail server refused, and an admin's Resend, claim nothing once the reply is
    recorded (before a worker moved the ticket on: its status still says waiting), the guard
    being in the outbox's claim."""
    settings.REFUNDS_ASK_REMIND_DAYS, settings.REFUNDS_ASK_GIVE_UP_DAYS = 3, 7
    with time_machine.travel("2026-12-01 09:00 +0000", tick=True) as clock:
        ticket = waiting_review(late_order, colleague)
        question = asked(ticket, agent)
        clock.shift(timedelta(days=3, minutes=1))
        smtp.refuse(1, code=451)  # a busy mail server: the reminder waits for the next beat
        assert tasks.escalate_overdue_reviews() == 1
        smtp.accept()
        reminder = Email.objects.get(key=question.email_key + asking.REMINDER_SUFFIX)
        assert reminder.status != Email.Status.SENT and reminder.attempts == 1
        reply_in(question)
        ticket.refresh_from_db()
        assert ticket.status == Ticket.Status.AWAITING_CUSTOMER  # no worker moved it on yet
        assert tasks.escalate_overdue_reviews() == 0  # its delivery of the reminder: nothing
        assert refunds_mail.resend(reminder.pk) is False  # the claim itself
        with pytest.raises(services.RefundError, match="not true any more"):
            services.email_resend(email_id=reminder.pk, by=admin_user)
        assert runner.advance(ticket.pk) == "awaiting_review"
        assert refunds_mail.resend(reminder.pk) is False
        assert reminder.pk not in {email.pk for email, _ in ops_selectors.undelivered()}
    assert smtp.keys()[reminder.key] == 0


def test_the_timeline_quotes_the_reply_without_the_blank_lines_its_email_ends_with(
    transactional_db, client, agent, colleague, late_order
):
    ticket = waiting_review(late_order, colleague)
    question = asked(ticket, agent)
    reply_in(question, body="Here is the photo.\n\n")
    assert Decision.objects.get(answer="reply").reason == "Here is the photo."
    client.force_login(agent)
    page = client.get(f"/tickets/{ticket.pk}/").content.decode()
    assert "The customer replied: “Here is the photo.”; the review is back" in page


def test_the_outcome_of_a_wait_on_the_customer_says_they_replied_not_who_decided(
    transactional_db, agent, colleague, late_order
):
    """A page that saw the wait asks how it ended: the customer replied (or no reply came),
    never "decided by the customer ..., rejected"."""
    from refunds import selectors

    ticket = waiting_review(late_order, colleague)
    question = asked(ticket, agent)
    waited_on = ticket.pending_interrupt_id
    reply_in(question)
    said = selectors.review_outcome(ticket, waited_on, now=timezone.now())
    assert said is not None and said.startswith("Order 1042: the customer was asked, and replied")
    assert "rejected" not in said and "decided" not in said
