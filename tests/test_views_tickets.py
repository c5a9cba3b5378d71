"""The tickets page: search, filters, sort and pages, over the tickets the user may read; the
same number of queries whatever the number of tickets."""

from __future__ import annotations

import pytest
from django.db import connection
from django.test.utils import CaptureQueriesContext
from django.urls import reverse

from refunds.models import Decision, Ticket
from tests.conftest import make_order
from tests.reviewing import awaiting_review

TICKETS = reverse("reviews:tickets")


def shown(response) -> set[str]:
    return {t.order.number for t in response.context["rows"]}


@pytest.fixture
def some(db, agent, manager):
    ana = awaiting_review(make_order("5001", fee_cents=699, name="Ana Souza"), opened_by=agent)
    dev = awaiting_review(make_order("5002", fee_cents=4800, name="Dev Patel"))
    cy = Ticket.objects.create(
        thread_id="t-5003",
        order=make_order("5003", fee_cents=1500, name="Cy Lin"),
        status=Ticket.Status.REFUNDED,
        amount_cents=1500,
        required_role="agent",
    )
    Decision.objects.create(ticket=cy, interrupt_id="i-5003", reviewer=manager, answer="approve")
    return {"ana": ana, "dev": dev, "cy": cy}


@pytest.mark.parametrize(
    ("query", "expected"),
    [
        ("q=5002", {"5002"}),  # an order number
        ("q=dev@example.com", {"5002"}),  # a customer's email
        ("q=DEV@Example.com", {"5002"}),  # in any case (through the UPPER(email) index)
        ("q=souza", {"5001"}),  # part of a name
        ("q=nobody-like-this", set()),
        ("status=refunded", {"5003"}),
        ("role=manager", {"5002"}),
        ("min_amount=10&max_amount=20", {"5003"}),
        ("min_amount=%2410.00", {"5002", "5003"}),
        ("mine=on", {"5001"}),
        ("age=24h", {"5001", "5002", "5003"}),
        ("age=older", set()),
    ],
)
def test_it_finds_tickets_by_search_and_filters(client, agent, manager, some, query, expected):
    client.force_login(manager if "mine" not in query else agent)
    response = client.get(f"{TICKETS}?{query}")
    assert response.status_code == 200
    assert shown(response) == expected


def test_an_order_number_that_is_not_digits_is_found_in_any_case(client, manager, some):
    awaiting_review(make_order("ab-77", fee_cents=500, name="Eve Ng"))
    awaiting_review(make_order("5009", fee_cents=500, name="Gabe Ross"))
    client.force_login(manager)

    assert shown(client.get(f"{TICKETS}?q=AB-77")) == {"ab-77"}
    assert shown(client.get(f"{TICKETS}?q=ab")) == {"5009"}  # no such order: part of a name


def test_it_finds_a_ticket_by_its_id_and_what_i_decided(client, manager, some):
    client.force_login(manager)
    assert shown(client.get(f"{TICKETS}?q={some['cy'].pk}")) >= {"5003"}
    assert shown(client.get(f"{TICKETS}?decided=on")) == {"5003"}


def test_it_shows_an_agent_only_their_scope(client, agent, some):
    client.force_login(agent)
    assert shown(client.get(TICKETS)) == {"5001", "5003"}


def test_it_sorts_by_amount(client, manager, some):
    client.force_login(manager)
    rows = client.get(f"{TICKETS}?sort=amount_high").context["rows"]
    assert [t.order.number for t in rows] == ["5002", "5003", "5001"]


def test_it_says_what_is_wrong_with_a_filter(client, manager, some):
    client.force_login(manager)
    html = client.get(f"{TICKETS}?min_amount=lots").content.decode()
    assert "is not an amount in US dollars" in html


def test_it_answers_htmx_with_the_results_only(client, manager, some):
    client.force_login(manager)
    response = client.get(f"{TICKETS}?q=5002", headers={"HX-Request": "true"})
    html = response.content.decode()
    assert html.startswith('<section id="tickets-results"') and "<html" not in html
    assert "HX-Request" in response["Vary"]


def test_it_costs_the_same_queries_at_any_size(client, manager, db, monkeypatch):
    from reviews.views import tickets as views

    monkeypatch.setattr(views, "TICKETS_PAGE", 5)

    def queries(url: str) -> int:
        with CaptureQueriesContext(connection) as seen:
            assert client.get(url).status_code == 200
        return len(seen)

    client.force_login(manager)
    urls = [TICKETS, f"{TICKETS}?q=Customer&sort=amount_low&page=2", f"{TICKETS}?status=refunded"]
    for n in range(12):
        Ticket.objects.create(
            thread_id=f"t{n}", order=make_order(f"9{n:03d}", name="Customer X"), status="refunded"
        )
    few = [queries(url) for url in urls]
    for n in range(12, 60):
        Ticket.objects.create(
            thread_id=f"t{n}", order=make_order(f"9{n:03d}", name="Customer X"), status="refunded"
        )
    assert [queries(url) for url in urls] == few


@pytest.mark.parametrize("typed", ["１２", "1e3"])
def test_it_refuses_an_amount_filter_in_full_width_digits_or_an_exponent(
    client, manager, some, typed
):
    client.force_login(manager)
    response = client.get(TICKETS, {"max_amount": typed})
    assert f"“{typed}” is not an amount in US dollars" in response.content.decode()
    # Nothing is filtered by a number the page could not read.
    assert len(response.context["rows"]) == 3
