"""The ticket page shows what each of its orders holds: every line bought, what of it was
refunded (nothing until refunds by line exist) and what is left; an order sent without its lines
shows none."""

from __future__ import annotations

import re

from django.urls import reverse

from refunds.models import Ticket, TicketOrder
from tests.conftest import give_lines, make_order
from tests.reviewing import awaiting_review

POLL = {"HX-Request": "true", "HX-Target": "ticket-status"}


def page(ticket: Ticket) -> str:
    return reverse("reviews:ticket", args=[ticket.pk])


def rows(html: str, number: str) -> list[list[str]]:
    """The cells of each line of order `number`'s table, as text."""
    table = re.search(rf'<div class="bought" data-order="{number}">(.*?)</table>', html, re.S)
    assert table, f"no table for order {number}"
    body = re.search(r"<tbody>(.*?)</tbody>", table[1], re.S)
    assert body
    return [
        [re.sub(r"<[^>]+>", "", cell).strip() for cell in re.findall(r"<td[^>]*>(.*?)</td>", row)]
        for row in re.findall(r"<tr[^>]*>(.*?)</tr>", body[1], re.S)
    ]


def test_the_ticket_page_shows_each_line_bought_refunded_and_left(client, agent, late_order):
    give_lines(late_order, [("Blue vase", 4500, 2), ("Desk lamp", 1500, 1)])
    ticket = awaiting_review(late_order)
    client.force_login(agent)

    html = client.get(page(ticket)).content.decode()

    assert rows(html, "1042") == [
        ["Blue vase SKU-1", "2", "$45.00", "0", "2"],
        ["Desk lamp SKU-2", "1", "$15.00", "0", "1"],
    ]
    assert "Shipping $6.99 · total $111.99 · paid $111.99" in html
    assert "What was bought</caption>" in html  # one order: not named again


def test_the_polled_status_fragment_keeps_the_lines(client, agent, late_order):
    give_lines(late_order, [("Blue vase", 4500, 2)])
    ticket = awaiting_review(late_order)
    client.force_login(agent)

    html = client.get(page(ticket), headers=POLL).content.decode()

    assert rows(html, "1042") == [["Blue vase SKU-1", "2", "$45.00", "0", "2"]]


def test_a_ticket_of_several_orders_shows_a_table_for_each_order_with_lines(
    client, agent, late_order
):
    give_lines(late_order, [("USB-C charger", 2999, 1)])
    laptop = give_lines(make_order("1050", fee_cents=0), [("Laptop", 89900, 1)], tax_cents=7192)
    ticket = awaiting_review(late_order)
    TicketOrder.objects.create(ticket=ticket, order=laptop, position=1)
    TicketOrder.objects.create(ticket=ticket, order=make_order("1052"), position=2)
    client.force_login(agent)

    html = client.get(page(ticket)).content.decode()

    assert "What was bought in order 1042" in html and "What was bought in order 1050" in html
    assert rows(html, "1050") == [["Laptop SKU-1", "1", "$899.00", "0", "1"]]
    assert 'data-order="1052"' not in html.split("bought-table")[-1]
    assert html.count('class="bought-table"') == 2


def test_an_order_without_lines_shows_no_table(client, agent, late_order):
    ticket = awaiting_review(late_order)
    client.force_login(agent)

    html = client.get(page(ticket)).content.decode()

    assert "bought-table" not in html
