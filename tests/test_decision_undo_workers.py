"""Undo against a real worker process on the real broker: the worker applies a decision only
after its grace (woken by a countdown task), an Undo inside the grace leaves it nothing to
apply, and an Undo still holding the row as the grace ends beats the worker's apply (on
PostgreSQL the worker has read the decision and waits in its compare-and-set, runner._taken; on
SQLite the database's one writer makes it wait earlier). The decision is recorded in this
process with the grace of its setting; the worker reads `apply_after` from the row."""

from __future__ import annotations

import threading
from datetime import timedelta

import pytest
from django.db import connection, transaction
from django.db.models.functions import Now
from django.urls import reverse
from django.utils import timezone

from core.sql import is_postgres
from refunds import services
from refunds.models import Charge, Decision, Ticket
from tests.conftest import wait_for

pytestmark = pytest.mark.slow
GRACE = 3


@pytest.fixture
def review(workers, settings, client, agent, admin_user, late_order) -> Ticket:
    settings.REFUNDS_UNDO_SECONDS = GRACE
    workers("w1")
    client.force_login(agent)
    client.post(reverse("reviews:ticket_new"), {"order_number": "1042", "note": "late"})
    ticket = Ticket.objects.get()
    wait_for(lambda: status_of(ticket.pk) == "awaiting_review", what="the review")
    ticket.refresh_from_db()
    client.force_login(admin_user)
    return ticket


def status_of(ticket_id: int) -> str:
    return Ticket.objects.get(pk=ticket_id).status


def approve(client, ticket: Ticket) -> Decision:
    client.post(
        reverse("reviews:decide", args=[ticket.pk]),
        {"interrupt_id": ticket.pending_interrupt_id, "approve": "1"},
    )
    return Decision.objects.get(ticket=ticket)


def epoch(ticket: Ticket) -> int:
    return Ticket.objects.values_list("lease_epoch", flat=True).get(pk=ticket.pk)


def worker_done_after(ticket: Ticket, before: int) -> bool:
    """A worker took the ticket's lease since `before` and let it go."""
    row = Ticket.objects.values_list("lease_epoch", "lease_owner").get(pk=ticket.pk)
    return row[0] > before and row[1] == ""


def test_the_worker_applies_the_decision_after_its_grace(review, client, sinks):
    decision = approve(client, review)
    grace_ends = decision.apply_after
    assert grace_ends is not None
    wait_for(lambda: status_of(review.pk) == "refunded", what="the refund after the grace")
    charge = Charge.objects.get(ticket=review)
    assert charge.created_at >= grace_ends  # not one moment before
    assert [r["amount_cents"] for r in sinks.gateway.refunds_for(review.thread_id)] == [699]


def test_an_undo_in_the_grace_leaves_the_worker_nothing_to_apply(review, client, admin_user):
    decision = approve(client, review)
    before = epoch(review)
    services.decision_undo(decision_id=decision.pk, by=admin_user)
    # The countdown task still wakes the worker after the grace: it finds nothing to apply.
    wait_for(lambda: worker_done_after(review, before), what="the worker's wake-up", timeout=30)
    assert status_of(review.pk) == "awaiting_review"
    assert not Charge.objects.exists() and not Decision.objects.exists()


def test_an_undo_holding_the_row_as_the_grace_ends_beats_the_worker(review, client, sinks):
    decision = approve(client, review)
    before = epoch(review)
    deleted, release = threading.Event(), threading.Event()
    won: list[int] = []

    def undo() -> None:
        try:
            with transaction.atomic():
                n, _ = Decision.objects.filter(pk=decision.pk, apply_after__gt=Now()).delete()
                won.append(n)
                deleted.set()
                release.wait(60)
        finally:
            connection.close()

    thread = threading.Thread(target=undo)
    thread.start()
    try:
        assert deleted.wait(10) and won == [1]
        grace_ends = decision.apply_after + timedelta(seconds=1)
        wait_for(lambda: timezone.now() > grace_ends, what="the end of the grace")
        if is_postgres():  # the worker took the lease, read the decision, and waits on its row
            wait_for(lambda: epoch(review) > before, what="the worker's lease", timeout=30)
    finally:
        release.set()
        thread.join(30)
    wait_for(lambda: worker_done_after(review, before), what="the worker's run", timeout=30)
    assert status_of(review.pk) == "awaiting_review"
    assert not Charge.objects.exists() and sinks.gateway.refunds_for(review.thread_id) == []
