"""`manage.py recover` says what it did, and exits non-zero when the broker refused."""

from __future__ import annotations

import pytest
from django.core.management import CommandError, call_command

from refunds.models import Ticket


def test_it_exits_non_zero_with_one_line_when_the_broker_refuses(
    db, late_order, monkeypatch, capsys
):
    Ticket.objects.create(thread_id="t", order=late_order)
    Ticket.objects.update(updated_at="2000-01-01T00:00:00Z")  # past the sweep's grace
    monkeypatch.setattr("refunds.enqueue.wake", lambda ticket_id: False)  # refused
    with pytest.raises(CommandError) as failed:
        call_command("recover")
    assert str(failed.value) == (
        "Re-enqueued nothing for sure: the broker took 0 of 1 wake-ups; "
        "the rest wait for the next sweep."
    )
    assert "Re-enqueued 1" not in capsys.readouterr().out


def test_it_says_what_it_re_enqueued(db, late_order, monkeypatch, capsys):
    ticket = Ticket.objects.create(thread_id="t", order=late_order)
    Ticket.objects.update(updated_at="2000-01-01T00:00:00Z")
    monkeypatch.setattr("refunds.enqueue.wake", lambda ticket_id: True)
    call_command("recover")
    assert capsys.readouterr().out.strip() == f"Re-enqueued 1 ticket(s): {ticket.pk}"
