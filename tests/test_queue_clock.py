"""The desk's change clock (migration 0047): the database moves a ticket's card version in every
transaction that changes what its queue card shows, whichever code path wrote it, and never back."""

from __future__ import annotations

from django.db import connection

from refunds.models import Decision, Ticket
from refunds.selectors import queue_clock
from tests.conftest import make_order
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
    Ticket.objects.filter(pk=ticket.pk).update(claimed_by=agent)
    moved = version(ticket)
    stale.note = "written from an older copy"
    stale.save()  # writes every column, the older card_version among them
    assert version(ticket) > moved
