"""The indexes the desk's pages rely on at 100,000 tickets: each query plan names its index, on
SQLite and on PostgreSQL. A test's tables are tiny and its rows not yet vacuumed (no index-only
scan looks cheap), so PostgreSQL is told to avoid the paths those invite (a sequential scan, a
full walk of another index, a sort): the plan then shows that the index serves the query.
bench/pages.py shows the plans' effect at 100,000 tickets."""

from __future__ import annotations

import pytest
from django.db import connection
from django.utils import timezone

from refunds import selectors
from refunds.models import Decision, Order, Ticket
from reviews.views.queue import DECIDED_SHOWN, QUEUE_ORDER
from tests.conftest import make_order
from tests.reviewing import awaiting_review, many_tickets

pytestmark = pytest.mark.django_db


@pytest.fixture(autouse=True)
def _no_seqscan(db) -> None:
    if connection.vendor == "postgresql":
        with connection.cursor() as cursor:  # the test's transaction: undone with it
            cursor.execute("SET LOCAL enable_seqscan = off")


def _plan(queryset, *, avoid: str = "") -> str:
    if avoid and connection.vendor == "postgresql":
        with connection.cursor() as cursor:
            cursor.execute(f"SET LOCAL enable_{avoid} = off")
    return queryset.explain()


def _names(q: str, user) -> set[str]:
    return {
        t.order.customer_name
        for t in selectors.ticket_search(Ticket.objects.all(), user=user, q=q).select_related(
            "order"
        )
    }


def test_the_queue_reads_a_reviewers_recent_decisions_through_their_index(agent, late_order):
    ticket = awaiting_review(late_order)
    Decision.objects.create(ticket=ticket, interrupt_id="i1", reviewer=agent, answer="approve")
    recent = Decision.objects.filter(
        reviewer_id=agent.pk, decided_at__gte=timezone.now() - DECIDED_SHOWN
    )
    # Their newest first needs no sort through this index; through the reviewer's own foreign-key
    # index it does, which a planner with fresh statistics on a tiny table may otherwise prefer.
    assert "decision_reviewer_recent_idx" in _plan(recent, avoid="sort")


def test_a_search_by_part_of_a_name_reads_the_name_index(manager):
    _finished_tickets(2000)  # "Customer 0" to "Customer 1999", and statistics
    awaiting_review(make_order("7701", name="Zoë Quartermaine"))
    found = selectors.ticket_search(Ticket.objects.all(), user=manager, q="QUARTERM")
    plan = _plan(found, avoid="indexscan")
    if connection.vendor == "sqlite":
        assert "refunds_order_name VIRTUAL TABLE" in plan
    else:
        assert "order_name_trgm_idx" in plan
    assert [t.order.customer_name for t in found] == ["Zoë Quartermaine"]


def test_the_name_search_follows_new_renamed_and_deleted_orders_whatever_the_case(manager):
    order = make_order("8801", name="José Álvarez")
    awaiting_review(order)
    awaiting_review(make_order("8802", name="Ana Souza"))
    assert _names("josé", manager) == {"José Álvarez"}
    assert _names("ÁLVAREZ", manager) == {"José Álvarez"}
    assert _names("Jo", manager) == {"José Álvarez"}  # under three characters: read them all
    Order.objects.filter(pk=order.pk).update(customer_name="Joana Lima")
    assert _names("álvarez", manager) == set()
    assert _names("joana", manager) == {"Joana Lima"}
    Ticket.objects.filter(order=order).delete()
    order.links.all().delete()
    Order.objects.filter(pk=order.pk).delete()
    assert _names("joana", manager) == set()
    assert _names("souza", manager) == {"Ana Souza"}


@pytest.mark.parametrize("persona", ["agent", "manager"])
def test_the_queue_counts_its_reviews_from_the_covering_index(request, persona, late_order):
    from refunds import permissions

    awaiting_review(late_order)
    _finished_tickets(2000)
    user = request.getfixturevalue(persona)
    waiting = permissions.reviewable(user).order_by(*QUEUE_ORDER).values("pk")[:1001]
    plan = _plan(waiting, avoid="sort")
    assert "ticket_queue_cover_idx" in plan
    if connection.vendor == "sqlite":
        assert "COVERING INDEX ticket_queue_cover_idx" in plan  # no row read at all


def _finished_tickets(count: int) -> None:
    """A desk's history: many finished tickets beside the few that wait, and fresh statistics
    (SQLite's planner weighs its indexes by them, as it would on a desk that ran a while)."""
    many_tickets(count, prefix="H")
    with connection.cursor() as cursor:
        cursor.execute("ANALYZE")
