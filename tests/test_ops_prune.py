"""`manage.py prune`: finished threads keep their last checkpoint only; the audit rows stay and
the history page still tells the story."""

from __future__ import annotations

from io import StringIO

import pytest
from django.core.management import call_command
from django.urls import reverse

from ops.models import PrunedThread
from refunds import enqueue, persistence, runner, services
from refunds.models import AuditEvent, Ticket
from refunds.persistence import storage
from tests.reviewing import advance_to_review, decide


@pytest.fixture(autouse=True)
def no_broker(monkeypatch):
    monkeypatch.setattr(enqueue, "wake", lambda ticket_id: None)


@pytest.fixture
def refunded(transactional_db, agent, admin_user, late_order) -> Ticket:
    ticket = services.ticket_open(order_number="1042", opened_by=agent)
    ticket = advance_to_review(ticket)
    decide(ticket, admin_user, "approve", "four days late")
    assert runner.advance(ticket.pk) == "refunded"
    return Ticket.objects.get(pk=ticket.pk)


def prune(*args: str) -> str:
    out = StringIO()
    call_command("prune", *args, stdout=out, stderr=StringIO())
    return out.getvalue()


def test_a_dry_run_changes_nothing(refunded):
    before = len(storage.checkpoint_rows(refunded.thread_id))
    assert before > 1
    said = prune("--older-than", "0", "--dry-run")
    assert (
        f"Would prune 1 of 1 finished thread(s) older than 0 day(s): {before - 1} checkpoint"
        in said
    )
    assert len(storage.checkpoint_rows(refunded.thread_id)) == before
    assert not PrunedThread.objects.exists()


def test_young_threads_are_left_alone(refunded):
    assert "Pruned 0 of 0" in prune("--older-than", "30")
    assert len(storage.checkpoint_rows(refunded.thread_id)) > 1


def test_prune_keeps_the_last_checkpoint_and_the_history_still_renders(
    client, refunded, admin_user
):
    last = persistence.snapshot(refunded.thread_id)
    audit = AuditEvent.objects.filter(ticket=refunded).count()
    before = len(storage.checkpoint_rows(refunded.thread_id))
    said = prune("--older-than", "0")
    assert "Pruned 1 of 1" in said
    rows = storage.checkpoint_rows(refunded.thread_id)
    assert [r.checkpoint_id for r in rows] == [last.config["configurable"]["checkpoint_id"]]
    kept = persistence.snapshot(refunded.thread_id)
    assert kept.values["outcome"] == "refunded" and kept.next == ()
    assert AuditEvent.objects.filter(ticket=refunded).count() == audit
    record = PrunedThread.objects.get(ticket=refunded)
    assert record.checkpoints_removed == before - 1
    assert record.bytes_after < record.bytes_before
    client.force_login(admin_user)
    html = client.get(reverse("ops:history", args=[refunded.pk])).content.decode()
    assert "Older checkpoints were pruned" in html
    assert "Approved" in html and "four days late" in html  # from the audit rows
    assert 'id="checkpoint-count">1<' in html
    assert "Refunded $6.99" in html
