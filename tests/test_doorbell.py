"""The doorbell's watcher (reviews/doorbell.py): which cards each role's stream hears of, read
from the change clock; the stream itself, through a real events process, is tests/test_events.py."""

from __future__ import annotations

import psycopg
import pytest
from django.conf import settings

from refunds.models import Ticket
from refunds.selectors import queue_clock
from reviews import doorbell
from reviews.doorbell import AGENT, MANAGER, Watcher
from tests.conftest import database_url, make_order
from tests.reviewing import awaiting_review


def version(ticket: Ticket) -> int:
    return Ticket.objects.values_list("card_version", flat=True).get(pk=ticket.pk)


def card(ticket: Ticket) -> list[int | None]:
    """What a ring names of it: [id, version, waiting since in epoch ms]."""
    ticket.refresh_from_db()
    since = ticket.review_since
    return [ticket.pk, ticket.card_version, since and int(since.timestamp() * 1000)]


def test_the_first_tick_reads_the_clock_and_rings_nobody(db):
    awaiting_review(make_order("7101"))
    watcher = Watcher()
    assert watcher.tick() == {}
    assert watcher.clock == queue_clock()
    assert watcher.tick() == {}  # nothing moved


def test_a_card_that_moves_rings_the_roles_whose_queue_shows_it(db, manager):
    watcher = Watcher()
    watcher.tick()
    small = awaiting_review(make_order("7102"))
    big = awaiting_review(make_order("7103", fee_cents=4800))
    rings = watcher.tick()
    assert rings[AGENT] == [card(small)]  # not the managers' review
    assert rings[MANAGER] == [card(small), card(big)]
    assert watcher.clock == queue_clock() == version(big)

    Ticket.objects.filter(pk=big.pk).update(claimed_by=manager)
    assert watcher.tick() == {MANAGER: [card(big)]}


def test_a_card_that_leaves_a_queue_rings_it_once_more_and_then_no_longer(db, manager):
    ticket = awaiting_review(make_order("7104"))
    watcher = Watcher()
    watcher.tick()  # it is in the agents' queue
    Ticket.objects.filter(pk=ticket.pk).update(escalated_for=ticket.pending_interrupt_id)
    assert watcher.tick() == {
        AGENT: [card(ticket)],  # gone from their queue: the page removes it
        MANAGER: [card(ticket)],
    }
    Ticket.objects.filter(pk=ticket.pk).update(claimed_by=manager)
    assert watcher.tick() == {MANAGER: [card(ticket)]}


def test_a_decided_card_rings_the_queue_it_left(db):
    ticket = awaiting_review(make_order("7105"))
    watcher = Watcher()
    watcher.tick()
    Ticket.objects.filter(pk=ticket.pk).update(status=Ticket.Status.REJECTED)
    assert watcher.tick() == {
        AGENT: [card(ticket)],
        MANAGER: [card(ticket)],
    }
    Ticket.objects.filter(pk=ticket.pk).update(note="later", reason="late")
    assert watcher.tick() == {}


def test_more_cards_than_one_event_names_ring_every_role_to_resync(db, monkeypatch):
    monkeypatch.setattr(doorbell, "MOST_CARDS", 2)
    watcher = Watcher()
    watcher.tick()
    tickets = [awaiting_review(make_order(f"711{n}")) for n in range(3)]
    assert watcher.tick() == {AGENT: None, MANAGER: None}  # an import: the pages poll everything
    Ticket.objects.filter(pk=tickets[0].pk).update(status=Ticket.Status.REJECTED)
    ring = [card(tickets[0])]
    assert watcher.tick() == {AGENT: ring, MANAGER: ring}  # it was in their queues


@pytest.mark.skipif(
    not settings.DATABASES["default"]["ENGINE"].endswith("postgresql"),
    reason="SQLite has one writer at a time: versions are taken in commit order",
)
def test_a_card_committed_after_a_later_version_was_read_still_rings(transactional_db, manager):
    first = awaiting_review(make_order("7106", fee_cents=4800))
    second = awaiting_review(make_order("7107", fee_cents=4800))
    watcher = Watcher()
    watcher.tick()
    with psycopg.connect(database_url()) as slow:  # a transaction that writes first ...
        slow.execute(
            "UPDATE refunds_ticket SET claimed_by_id = %s WHERE id = %s", [manager.pk, first.pk]
        )
        Ticket.objects.filter(pk=second.pk).update(claimed_by=manager)  # ... commits last
        assert watcher.tick() == {MANAGER: [card(second)]}
    assert watcher.tick() == {MANAGER: [card(first)]}
