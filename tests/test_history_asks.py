"""The history and audit pages name a question to the customer, the customer's reply and the
timer's "no reply" by what they are, in words: none of them reads as a rejection, a reply has no
reviewer, and no Python value is printed on a page."""

from __future__ import annotations

import html as html_lib
import re
from datetime import timedelta

import pytest
import time_machine
from django.urls import reverse

from ops import history
from refunds import runner, tasks
from refunds.models import Ticket
from tests.reviewing import decide
from tests.test_ask_customer import ask, asked, no_broker, reply_in, waiting_review  # noqa: F401

TECHNICAL = re.compile(r'<details class="technical[^"]*"[^>]*>.*?</details>', re.S)
# What a Python dict, list or bool left in a page looks like once its quotes are unescaped.
REPR = re.compile(r"[{\[]'|': |\bTrue\b|\bFalse\b|\bNone\b")


def shown(html: str) -> str:
    """What a person reads: the text without tags and the admins' technical disclosures."""
    html = re.sub(r"</?strong>", "", TECHNICAL.sub("", html))  # inside a sentence
    return html_lib.unescape(re.sub(r"<[^>]+>", " ", html))


@pytest.fixture
def asked_twice(transactional_db, settings, agent, colleague, late_order) -> Ticket:
    """Asked, replied to; asked again, no reply by the timer's end; then approved and paid."""
    settings.REFUNDS_ASK_REMIND_DAYS, settings.REFUNDS_ASK_GIVE_UP_DAYS = 3, 7
    with time_machine.travel("2026-12-01 09:00 +0000", tick=True) as clock:
        ticket = waiting_review(late_order, colleague)
        reply_in(asked(ticket, agent))
        assert runner.advance(ticket.pk) == "awaiting_review"
        ticket.refresh_from_db()
        ask(ticket, agent, "Which of the two vases?")
        assert runner.advance(ticket.pk) == "awaiting_customer"
        clock.shift(timedelta(days=8))
        tasks.escalate_overdue_reviews()  # the reminder's beat, then the give-up's
        tasks.escalate_overdue_reviews()
        assert runner.advance(ticket.pk) == "awaiting_review"
        ticket.refresh_from_db()
        decide(ticket, agent)
        assert runner.advance(ticket.pk) == "refunded"
    return Ticket.objects.get(pk=ticket.pk)


def test_the_history_says_who_asked_what_the_customer_replied_and_that_none_came(
    client, asked_twice, admin_user
):
    client.force_login(admin_user)
    text = shown(client.get(reverse("ops:history", args=[asked_twice.pk])).content.decode())
    text = re.sub(r"\s+", " ", text)
    for words in (
        "Caused by agent asking the customer: “Could you send a photo of the damage?”",
        "Caused by the customer's reply: “Here is the photo: the vase is in pieces.”",
        "Caused by the wait's timer: no reply came from the customer",
        "Caused by the decision of agent: approved",
        "Question to the customer “Which of the two vases?” asked by agent",
        "The customer's reply “Here is the photo: the vase is in pieces.”",
        "The customer's reply none came: the wait's timer ran out",
        "Waiting on the customer's reply for $6.99 — answered: the customer replied",
        "answered: no reply came (the wait's timer ran out)",
        "answered: agent asked the customer instead",
        "Reason Late delivery",
    ):
        assert words in text, words
    # Nothing was rejected, and a reply or the timer is nobody's decision.
    assert "rejected" not in text.lower()
    assert not re.search(r"\bby\s*[:.—]", text), re.search(r".{60}\bby\s*[:.—].{20}", text)


def test_the_historys_audit_trail_names_the_customer_and_the_timer(client, asked_twice, admin_user):
    client.force_login(admin_user)
    html = client.get(reverse("ops:history", args=[asked_twice.pk])).content.decode()
    trail = html.split("<h2>Audit trail</h2>")[1]
    rows = [re.sub(r"\s+", " ", shown(row)).strip() for row in trail.split("<tr>")[2:]]
    assert any(
        row.endswith(
            "the customer The customer replied “Here is the photo: the vase is in "
            "pieces.”; the review is back in the queue"
        )
        for row in rows
    ), rows
    assert any(
        row.endswith("agent Asked the customer “Could you send a photo of the damage?”")
        for row in rows
    ), rows
    assert any(
        row.endswith(
            "the desk (the wait's timer) No reply from the customer the review is back in the "
            "queue without a reply"
        )
        for row in rows
    ), rows
    assert not any("The customer replied" in row and "timer" in row for row in rows), rows


@pytest.mark.parametrize("page", ["ops:history", "reviews:ticket", "reviews:audit"])
def test_no_page_of_an_asked_ticket_prints_a_python_value(client, asked_twice, admin_user, page):
    client.force_login(admin_user)
    args = [] if page == "reviews:audit" else [asked_twice.pk]
    html = client.get(reverse(page, args=args)).content.decode()
    if page == "reviews:ticket":  # its decisions, each by what it is, no reviewer made up
        said = re.sub(r"<[^>]+>", "", html)
        assert "The customer replied at Dec 1, 2026" in said
        assert "No reply from the customer (the wait's timer) at Dec 9, 2026" in html_lib.unescape(
            said
        )
    found = REPR.search(shown(html))
    assert found is None, shown(html)[max(found.start() - 80, 0) : found.end() + 80]


def test_a_state_value_without_words_is_left_out_of_the_history_never_printed_as_python():
    before = {"amount_cents": 699}
    after = {"amount_cents": 500, "something_new": {"question": "why?"}, "more": ["a", "b"]}
    changes, _, _ = history.diff(before, after)
    assert [(c.label, c.before, c.after) for c in changes] == [("Refund amount", "$6.99", "$5.00")]


def test_a_wait_closed_for_no_reply_then_reopened_by_a_reply_reads_so(
    client, transactional_db, settings, agent, colleague, admin_user, late_order
):
    from tests import test_ask_close

    settings.REFUNDS_ASK_DEFAULT_OUTCOME = "close"
    settings.REFUNDS_ASK_REMIND_DAYS, settings.REFUNDS_ASK_GIVE_UP_DAYS = 3, 7
    with time_machine.travel("2026-12-01 09:00 +0000", tick=True) as clock:
        ticket = waiting_review(late_order, colleague)
        question = asked(ticket, agent)
        test_ask_close.closed(ticket, clock)
        test_ask_close.reply_in(question)
        assert runner.advance(ticket.pk) == "awaiting_review"
    client.force_login(admin_user)
    html = client.get(reverse("ops:history", args=[ticket.pk])).content.decode()
    text = re.sub(r"\s+", " ", shown(html))
    for words in (
        "Caused by the wait's timer: no reply came from the customer",
        "Caused by the customer's reply: “Sorry, I was away: here is the photo.”",
        "the desk (the wait's timer) Reminded the customer of the question",
        "the ticket is closed as no reply; replying reopens it",
        "the customer The customer replied “Sorry, I was away: here is the photo.”; the ticket "
        "is reopened and the review is back in the queue",
    ):
        assert words in text, words
    assert "rejected" not in text.lower()
    assert REPR.search(text) is None


def test_the_audit_export_names_the_customer_the_timer_and_the_question(
    client, asked_twice, admin_user
):
    import csv
    import io

    client.force_login(admin_user)
    response = client.get(reverse("reviews:audit_export"))
    rows = list(csv.DictReader(io.StringIO(b"".join(response.streaming_content).decode())))
    said = [(r["action"], r["who"], r["answer"], r["reason"]) for r in reversed(rows)]
    assert said == [
        ("Opened", "bea", "", ""),
        ("Asked the customer", "agent", "ask", "Could you send a photo of the damage?"),
        ("The customer replied", "the customer", "reply", ""),
        ("Asked the customer", "agent", "ask", "Which of the two vases?"),
        ("No reply from the customer", "the desk (the wait's timer)", "no_reply", ""),
        ("Approved", "agent", "approve", ""),
    ], said
    assert rows[-3]["note"] == "Here is the photo: the vase is in pieces."
