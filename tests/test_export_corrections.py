"""`manage.py export_corrections` writes what reviewers chose for messages the reader did not
settle as labelled lines eval_intake reads: a sorted message, one sent back with "Misread? Send
back" and sorted again (the reading chosen then), addresses masked."""

from __future__ import annotations

import json
from io import StringIO

from django.core.management import call_command

from devtools import evaluation
from intake import sorting
from intake.models import Message
from refunds import policy, runner
from refunds.models import Ticket
from tests.conftest import make_order
from tests.sorting_messages import a_reading, waiting_message

BODY = "Hi, the mug of order #1042 arrived in pieces. Write to ana.souza@work.example. Ana"


def export(*args: str) -> list[dict]:
    out = StringIO()
    call_command("export_corrections", *args, stdout=out)
    return [json.loads(line) for line in out.getvalue().splitlines()]


def test_a_message_a_reviewer_sorted_otherwise_than_read_is_a_labelled_line_masked(
    transactional_db, agent
):
    make_order("1042")
    message = waiting_message(body=BODY, reading=a_reading(policy.NOT_REFUND, ()))
    sorting.message_sort(message=message, order_numbers=["1042"], reason="damaged", by=agent)

    (line,) = export()

    assert line == {
        "sender": "customer-1@example.invalid",
        "subject": "Broken mug",
        "body": "Hi, the mug of order #1042 arrived in pieces. Write to "
        "customer-2@example.invalid. Ana",
        "orders": ["1042"],
        "reason": "damaged",
        "read_reason": "not_refund",
        "read_orders": [],
        "message": message.pk,
    }


def test_a_message_sorted_as_it_was_read_is_written_only_with_all(transactional_db, agent):
    make_order("1042")
    message = waiting_message(reading=a_reading(policy.DAMAGED, ("1042",)))
    sorting.message_sort(message=message, order_numbers=["1042"], reason="damaged", by=agent)
    assert export() == []
    assert [line["reason"] for line in export("--all")] == ["damaged"]


def test_sent_back_it_is_left_out_until_sorted_again_then_the_reading_chosen_then(
    transactional_db, agent, manager, tmp_path
):
    make_order("1042")
    message = waiting_message(reading=a_reading(policy.LATE_DELIVERY, ("1042",)))
    ticket = sorting.message_sort(
        message=message, order_numbers=["1042"], reason="late_delivery", by=agent
    ).opened
    assert runner.advance(ticket.pk) == "awaiting_review"
    sorting.message_send_back(ticket=Ticket.objects.get(pk=ticket.pk), why="misread", by=manager)
    assert export("--all") == []

    message = Message.objects.get(pk=message.pk)
    sorting.message_sort(message=message, order_numbers=["1042"], reason="damaged", by=manager)
    path = tmp_path / "corrections.jsonl"
    call_command("export_corrections", "--output", str(path), stderr=StringIO())

    (example,) = evaluation.load(path)  # eval_intake reads what it writes
    assert (example.reason, example.orders) == ("damaged", ("1042",))
