"""The ticket page's headings go down one level at a time (h1, then h2, then h3), with what
was read from a customer's message, parts to refund, a question waiting on the customer, or a
ticket already paid: a screen reader's outline skips nothing (axe: heading-order)."""

from __future__ import annotations

import re

import pytest
from django.urls import reverse

from refunds import runner
from refunds.models import Ticket
from tests.conftest import give_lines
from tests.reviewing import awaiting_review, decide
from tests.sorting_messages import a_reading
from tests.test_ask_customer import asked, no_broker, waiting_review  # noqa: F401

HEADING = re.compile(r"<h([1-6])\b[^>]*>(.*?)</h\1>", re.S)


def skipped_levels(html: str) -> list[str]:
    """Each heading that comes more than one level below the heading before it."""
    found, last = [], 0
    for level, words in ((int(m[1]), m[2]) for m in HEADING.finditer(html)):
        if level > last + 1:
            found.append(f"h{last} then h{level} {re.sub(r'<[^>]+>', '', words).strip()!r}")
        last = level
    return found


def read_from_a_message(order) -> Ticket:
    ticket = awaiting_review(order)
    Ticket.objects.filter(pk=ticket.pk).update(reading=a_reading())
    return ticket


def lines_read_from_a_message(order) -> Ticket:
    give_lines(order, [("Ceramic vase", 2400, 2)])
    return read_from_a_message(order)


def asked_the_customer(order) -> Ticket:
    from django.contrib.auth.models import User

    ticket = waiting_review(order, User.objects.get(username="bea"))
    asked(ticket, User.objects.get(username="agent"))
    return ticket


def refunded(order) -> Ticket:
    from django.contrib.auth.models import User

    ticket = waiting_review(order, User.objects.get(username="bea"))
    decide(ticket, User.objects.get(username="manager"))
    assert runner.advance(ticket.pk) == "refunded"
    return ticket


@pytest.mark.parametrize(
    "make", [read_from_a_message, lines_read_from_a_message, asked_the_customer, refunded]
)
def test_the_ticket_pages_headings_go_down_one_level_at_a_time(
    client, transactional_db, agent, colleague, manager, admin_user, late_order, make
):
    ticket = make(late_order)
    for user in (manager, admin_user):
        client.force_login(user)
        html = client.get(reverse("reviews:ticket", args=[ticket.pk])).content.decode()
        assert html.count("<h1") == 1
        assert skipped_levels(html) == [], user
