"""manage.py demo_reply: in the demo, the customer's reply to a reviewer's question (with a
photo) comes in by the inbound webhook's path and resumes the thread; one from another address
resumes nothing and says why; never in production."""

from __future__ import annotations

from io import StringIO

import pytest
from django.core.management import call_command
from django.core.management.base import CommandError

from intake.models import Message
from refunds import enqueue, runner
from tests.test_ask_customer import asked, waiting_review
from tests.test_attachments import photo


@pytest.fixture(autouse=True)
def demo(monkeypatch, settings):
    """The test runs the threads itself; the demo's settings."""
    monkeypatch.setattr(enqueue, "send", lambda name, pk: True)
    settings.DEMO = settings.DEBUG = True


def reply(*args: str) -> str:
    out = StringIO()
    call_command("demo_reply", *args, stdout=out)
    return out.getvalue()


def test_a_reply_with_a_photo_resumes_the_wait_and_the_card_shows_both(
    transactional_db, tmp_path, client, agent, colleague, late_order
):
    ticket = waiting_review(late_order, colleague)
    asked(ticket, agent)
    picture = tmp_path / "vase.jpg"
    picture.write_bytes(photo(seed="vase"))
    said = reply(
        late_order.number, "Here is the photo: the vase is in pieces.", "--attach", str(picture)
    )
    message = Message.objects.get()
    assert message.resumed_wait and message.ticket_id == ticket.pk
    assert message.sender == "ana@example.com"
    assert f"answers the question on ticket {ticket.pk}" in said
    [kept] = message.files.all()
    assert (kept.filename, kept.content_type) == ("vase.jpg", "image/jpeg")
    assert runner.advance(ticket.pk) == "awaiting_review"
    client.force_login(agent)
    card = client.get("/").content.decode()
    assert "the vase is in pieces" in card and f'<img src="/attachments/{kept.pk}/"' in card


def test_a_reply_from_another_address_resumes_nothing_and_says_why(
    transactional_db, agent, colleague, late_order
):
    ticket = waiting_review(late_order, colleague)
    asked(ticket, agent)
    said = reply(late_order.number, "It was me.", "--sender", "mallory@example.com")
    message = Message.objects.get()
    assert not message.resumed_wait and message.ticket_id == ticket.pk
    assert f"joined ticket {ticket.pk}'s timeline" in said
    assert "not from the customer's address ana@example.com" in said
    assert runner.advance(ticket.pk) == "awaiting_customer"


def test_demo_reply_says_when_no_question_was_asked(transactional_db, late_order):
    with pytest.raises(CommandError, match="No question was asked about order 1042"):
        reply(late_order.number, "Hello?")


def test_demo_reply_refuses_to_run_in_production(settings, db):
    settings.DEMO = False
    with pytest.raises(CommandError, match="runs only in the demo"):
        reply("1042", "Hello?")
    assert not Message.objects.exists()
