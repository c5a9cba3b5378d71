"""A customer asking where a refund they already asked for is (issue 33): no new ticket; the
sender's ticket answers with its status in words, in the message's language, once per message
even when the message is read again, counted at a real SMTP server; a sender with no ticket goes
to "Needs sorting"."""

from __future__ import annotations

import pytest
from django.utils import timezone

from intake import workflow
from intake.models import Message
from intake.reader import default
from intake.services import message_receive
from refunds import enqueue, persistence, policy, runner
from refunds.models import Ticket
from tests.conftest import helpdesk, make_order
from tests.reviewing import decide


@pytest.fixture(autouse=True)
def _no_broker(monkeypatch):
    monkeypatch.setattr(enqueue, "send", lambda name, pk: True)


def receive(
    body: str, *, key: str, sender: str = "ana@example.com", subject: str = "Refund?"
) -> Message:
    """A message handed in through the API and read by the intake, to its end."""
    message, _ = message_receive(
        channel="api",
        brought_by=helpdesk(),
        key=key,
        sender=sender,
        sender_name="Ana Souza",
        subject=subject,
        body=body,
        received_at=timezone.now(),
        raw=body,
    )
    assert workflow.message_take(message.pk) == "finished"
    message.refresh_from_db()
    return message


def test_the_senders_ticket_answers_with_its_status_once_and_opens_nothing(
    transactional_db, smtp, agent
):
    make_order("1042")
    first = receive(
        "Hi, my order #1042 came a week late, can I have the delivery fee back?", key="a"
    )
    ticket = first.ticket
    assert runner.advance(ticket.pk) == "awaiting_review"
    ticket.refresh_from_db()
    decide(ticket, agent)
    assert runner.advance(ticket.pk) == "refunded"
    before = smtp.count()

    asked = receive("Where is my refund? I don't see it on my card yet.", key="b")

    assert asked.status == Message.Status.ANSWERED and asked.ticket_id == ticket.pk
    assert Ticket.objects.count() == 1
    (answer,) = smtp.delivered[before:]
    assert answer.to == ["ana@example.com"] and answer.subject == "Re: Refund?"
    assert "refund request for order 1042" in answer.body
    assert "We refunded $6.99 on " in answer.body

    # Read again from the start, every step of its thread run anew: still one email.
    persistence.checkpointer().delete_thread(asked.thread_id)
    Message.objects.filter(pk=asked.pk).update(status=Message.Status.RECEIVED, finished_at=None)
    assert workflow.message_take(asked.pk) == "finished"
    assert Message.objects.get(pk=asked.pk).status == Message.Status.ANSWERED
    assert smtp.count() == before + 1


def test_the_answer_is_in_the_messages_language_and_says_a_review_waits(transactional_db, smtp):
    make_order("1042")
    ticket = receive("Mi pedido 1042 llegó con retraso, quiero el reembolso del envío.", key="a")
    assert runner.advance(ticket.ticket.pk) == "awaiting_review"
    before = smtp.count()
    asked = receive("¿Dónde está mi reembolso? Gracias.", key="b")
    assert asked.status == Message.Status.ANSWERED
    (answer,) = smtp.delivered[before:]
    assert "Gracias por preguntar por su solicitud de reembolso del pedido 1042." in answer.body
    assert "espera que una persona de nuestro equipo la revise" in answer.body


def test_where_is_my_refund_read_unsure_goes_to_sorting_and_answers_nothing(
    transactional_db, smtp, settings
):
    make_order("1042")
    ticket = receive("Order 1042 came a week late, can I have the delivery fee back?", key="a")
    assert runner.advance(ticket.ticket.pk) == "awaiting_review"
    before = smtp.count()
    settings.REFUNDS_READER_MIN_CONFIDENCE = 0.95  # the message below reads so about 88% sure

    asked = receive("has the refund gone through yet?", key="b")

    assert asked.status == Message.Status.NEEDS_SORTING
    assert asked.sorting_reason.startswith("The reader was unsure (confidence ")
    (told,) = smtp.delivered[before:]  # that a person will read it, not a status on a guess
    assert "A person on our team will read your message" in told.body
    assert "refund request for order 1042" not in told.body


def test_a_sender_with_no_ticket_goes_to_sorting(transactional_db, smtp):
    asked = receive("Where is my refund?", key="a", sender="zoe@example.com")
    assert asked.status == Message.Status.NEEDS_SORTING
    assert asked.sorting_reason == (
        "Asks where a refund is, but zoe@example.com has no ticket in the desk."
    )
    assert Ticket.objects.count() == 0


def test_where_is_my_refund_in_the_subject_over_a_new_request_is_the_request():
    reading = default.read(
        sender="a@example.com",
        subject="Where is my refund?",
        body="One of my parcels came late last week; I'd like the delivery charge back.",
    )
    assert reading.reason == policy.LATE_DELIVERY
    alone = default.read(sender="a@example.com", subject="Where is my refund?", body="Thanks, Iris")
    assert alone.reason == policy.REFUND_STATUS


def test_a_model_reading_where_is_my_refund_is_answered_the_same_way(
    transactional_db, smtp, settings, monkeypatch
):
    import json

    from langchain_core.language_models.fake_chat_models import GenericFakeChatModel
    from langchain_core.messages import AIMessage

    from intake.reader import model

    make_order("1042")
    opened = receive("My order #1042 came a week late, can I have the delivery fee back?", key="a")
    assert runner.advance(opened.ticket.pk) == "awaiting_review"
    before = smtp.count()
    settings.REFUNDS_MODEL = "fake:x"
    answer = {
        "reason": "refund_status",
        "orders": [],
        "amount_cents": None,
        "language": "en",
        "summary": "Asks after the refund.",
        "quotes": {},
        "confidence": 0.9,
    }
    monkeypatch.setattr(
        model,
        "build",
        lambda spec: GenericFakeChatModel(messages=iter([AIMessage(content=json.dumps(answer))])),
    )
    asked = receive("Any news about the money you owe me?", key="b")
    assert (asked.status, asked.reading["read_by"]) == (Message.Status.ANSWERED, "fake:x")
    (told,) = smtp.delivered[before:]
    assert "waiting for a person on our team" in told.body
