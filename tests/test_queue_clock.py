"""The desk's change clock (migration 0047): the database moves a ticket's card version in every
transaction that changes what its queue card shows, whichever code path wrote it, and never back."""

from __future__ import annotations

import time

import pytest
from django.db import connection

from refunds.models import Decision, Ticket
from refunds.selectors import queue_clock
from tests.conftest import database_url, in_another_session, make_order
from tests.reviewing import awaiting_review


def version(ticket: Ticket) -> int:
    return Ticket.objects.values_list("card_version", flat=True).get(pk=ticket.pk)


def test_a_card_change_moves_the_clock_whichever_way_it_is_written(db, agent):
    ticket = awaiting_review(make_order("7001"))
    before = queue_clock()
    assert version(ticket) == before > 0
    # An UPDATE through the ORM, raw SQL as the lease writes, and a decision on the ticket.
    Ticket.objects.filter(pk=ticket.pk).update(claimed_by=agent)
    assert queue_clock() == version(ticket) > before
    seen = queue_clock()
    with connection.cursor() as cursor:
        cursor.execute(
            "UPDATE refunds_ticket SET escalated_for = pending_interrupt_id WHERE id = %s",
            [ticket.pk],
        )
    assert version(ticket) > seen
    seen = queue_clock()
    Decision.objects.create(
        ticket=ticket, interrupt_id=ticket.pending_interrupt_id, reviewer=agent, answer="approve"
    )
    assert version(ticket) > seen


def test_a_write_the_card_does_not_show_leaves_the_clock(db):
    ticket = awaiting_review(make_order("7002"))
    seen = queue_clock()
    Ticket.objects.filter(pk=ticket.pk).update(lease_epoch=7, attempts=3, reminded_for="x")
    assert queue_clock() == seen == version(ticket)


def test_a_stale_copys_save_never_takes_a_card_version_back(db, agent):
    ticket = awaiting_review(make_order("7003"))
    stale = Ticket.objects.get(pk=ticket.pk)
    Decision.objects.create(  # moves the card's version, none of its columns
        ticket=ticket, interrupt_id=ticket.pending_interrupt_id, reviewer=agent, answer="approve"
    )
    moved = version(ticket)
    stale.note = "written from an older copy"
    stale.save()  # writes every column, the older card_version among them
    assert version(ticket) >= moved  # SQLite counts on, PostgreSQL keeps the row's own


def test_a_card_written_first_and_committed_last_moves_past_what_a_poll_read_between(
    transactional_db, agent
):
    """On PostgreSQL a version is taken at commit, in commit order: a poll that read the clock
    between the two commits still finds the slower one's card changed afterwards."""
    if connection.vendor != "postgresql":
        pytest.skip("SQLite writes one transaction at a time")
    import psycopg

    first = awaiting_review(make_order("7004"))
    second = awaiting_review(make_order("7005"))
    with psycopg.connect(database_url()) as slow:  # writes first ...
        slow.execute(
            "UPDATE refunds_ticket SET claimed_by_id = %s WHERE id = %s", [agent.pk, first.pk]
        )
        Ticket.objects.filter(pk=second.pk).update(claimed_by=agent)  # ... commits last
        seen = queue_clock()
        assert seen == version(second)
    assert version(first) > seen
    assert queue_clock() == version(first)


def test_a_commit_that_changes_a_card_takes_its_version_under_the_clocks_lock(
    transactional_db, agent
):
    """The version is taken and committed under one advisory lock: a second commit waits for
    the first to be visible, so versions never become visible out of their order."""
    if connection.vendor != "postgresql":
        pytest.skip("SQLite writes one transaction at a time")
    import psycopg

    ticket = awaiting_review(make_order("7006"))
    seen = version(ticket)
    with psycopg.connect(database_url(), autocommit=True) as holder:
        holder.execute("SELECT pg_advisory_lock(hashtext('refunds_card_version'))")
        writer = in_another_session(
            lambda: Ticket.objects.filter(pk=ticket.pk).update(claimed_by=agent)
        )
        waiting = "SELECT count(*) FROM pg_locks WHERE locktype = 'advisory' AND NOT granted"
        deadline = time.monotonic() + 10
        while holder.execute(waiting).fetchone()[0] != 1:  # type: ignore[index]
            assert time.monotonic() < deadline, "the commit never waited for the clock's lock"
            time.sleep(0.01)
        assert version(ticket) == seen  # not committed while the lock is held
        holder.execute("SELECT pg_advisory_unlock(hashtext('refunds_card_version'))")
        writer.join(timeout=10)
    assert not writer.is_alive() and version(ticket) > seen
