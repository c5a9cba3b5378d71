"""The desk's pages for a ticket of several orders (issue 18): the review card's line per order
and its answers per order, the ticket page, the tickets list and the dashboard, and a three-order
ticket reviewed per order through the page and run to its end in this process."""

from __future__ import annotations

import re

import pytest
from django.db import connection
from django.test import Client
from django.test.utils import CaptureQueriesContext
from django.urls import reverse

from refunds import enqueue, runner, services
from refunds.models import (
    AuditEvent,
    Charge,
    Decision,
    Email,
    Order,
    Ticket,
    TicketOrder,
)
from refunds.payments.demo import DemoProcessorRefund
from tests.conftest import make_order
from tests.reviewing import shipped
from tests.test_desk_several import agents_ticket, several

QUEUE = "/"
HTMX = {"HX-Request": "true"}


@pytest.fixture(autouse=True)
def _no_broker(monkeypatch):
    monkeypatch.setattr(enqueue, "wake", lambda ticket_id: True)  # the test advances itself


def three_orders() -> Ticket:
    """1042 $6.99 late, 1043 on time (declined by policy), 1049 $150.00 flagged: a manager's."""
    return several(("1042", 4, 699), ("1043", -1, 499), ("1049", 5, 15000))


def row_of(html: str, ticket: Ticket) -> str:
    start = html.index(f'id="review-{ticket.pk}"')
    return html[start : html.index("</tr>", start)]


def test_the_queue_card_shows_each_order_and_the_total(transactional_db, client, manager):
    ticket = three_orders()
    client.force_login(manager)
    row = row_of(client.get(QUEUE).content.decode(), ticket)
    assert "Orders 1042, 1043, 1049" in row
    lines = re.findall(r'<li class="order-line order-(\w+)[^"]*" data-order="(\d+)"', row)
    assert lines == [("open", "1042"), ("declined", "1043"), ("open", "1049")]
    assert "Declined by policy" in row and "early" in row
    assert "unusually high" in row  # 1049's flag, on its own line
    assert "Total $156.99</strong> on 2 of 3 orders" in row
    assert "Approve all $156.99" in row and "Save the answers per order" in row
    # Per open order: approve or reject, and (a manager) the amount; none for the declined one.
    assert 'name="order-1042"' in row and 'name="order-1049"' in row
    assert 'name="order-1043"' not in row
    assert f'form="decide-{ticket.pk}" name="amount-1049"' in row


def test_an_agent_gets_no_amount_input(transactional_db, client, agent):
    ticket = agents_ticket()
    client.force_login(agent)
    row = row_of(client.get(QUEUE).content.decode(), ticket)
    assert 'name="order-1044"' in row and 'name="amount-1044"' not in row


def test_answers_per_order_through_the_card_are_recorded(transactional_db, client, manager):
    ticket = three_orders()
    client.force_login(manager)
    form = {
        "interrupt_id": ticket.pending_interrupt_id,
        "orders": "1",
        "order-1042": "approve",
        "amount-1042": "5.00",
        "order-1049": "reject",
        "reason": "Ask the carrier first.",
    }
    response = client.post(reverse("reviews:decide", args=[ticket.pk]), form, headers=HTMX)
    assert response.status_code == 200, response.content.decode()
    said = "Approved $5.00 (instead of $6.99) for order 1042, rejected 1049"
    assert said in response.content.decode()
    decision = Decision.objects.get()
    assert decision.orders == {
        "1042": shipped(500),
        "1049": {"answer": "reject", "reason": "Ask the carrier first."},
    }


@pytest.mark.parametrize(
    ("fields", "words"),
    [
        ({"order-1042": "approve"}, "Choose approve or reject for order 1049"),
        ({"order-1042": "approve", "order-1049": "reject"}, "Give a reason for rejecting"),
        ({"order-1042": "approve", "amount-1042": "abc", "order-1049": "approve"}, "Order 1042"),
        ({"order-1042": "approve", "amount-1042": "9.00", "order-1049": "approve"}, "at most"),
    ],
)
def test_a_bad_answer_through_the_card_says_why_and_records_nothing(
    transactional_db, client, manager, fields, words
):
    ticket = three_orders()
    client.force_login(manager)
    form = {"interrupt_id": ticket.pending_interrupt_id, "orders": "1", **fields}
    response = client.post(reverse("reviews:decide", args=[ticket.pk]), form, headers=HTMX)
    assert response.status_code == 400
    assert words in response.content.decode()
    assert not Decision.objects.exists()


def test_approve_all_on_the_card_approves_every_open_order(transactional_db, client, manager):
    ticket = three_orders()
    client.force_login(manager)
    form = {"interrupt_id": ticket.pending_interrupt_id, "approve": "1"}
    client.post(reverse("reviews:decide", args=[ticket.pk]), form, headers=HTMX)
    assert Decision.objects.get().orders == {
        "1042": shipped(699),
        "1049": shipped(15000),
    }


def test_the_queue_costs_the_same_queries_with_more_tickets_of_several_orders(
    transactional_db, client, admin_user
):
    def queries() -> int:
        with CaptureQueriesContext(connection) as seen:
            assert client.get(QUEUE).status_code == 200
        return len(seen)

    client.force_login(admin_user)
    several(("3001", 4, 699), ("3002", 3, 800))
    few = queries()
    for n in range(3):
        for number, late, fee in ((f"31{n}1", 4, 650), (f"31{n}2", 2, 700), (f"31{n}3", 5, 900)):
            make_order(number, late=late, fee_cents=fee, name=f"Zed{n} Roe")
        ticket = services.ticket_open(order_numbers=[f"31{n}1", f"31{n}2", f"31{n}3"])
        assert runner.advance(ticket.pk) == "awaiting_review"
    assert queries() == few


def test_the_tickets_page_and_the_api_list_cost_the_same_queries_with_more_orders(
    transactional_db, client, admin_user
):
    from api.models import ApiToken

    api = Client(headers={"Authorization": f"Token {ApiToken.issue(admin_user)[1]}"})

    def queries() -> list[int]:
        counts = []
        for who, url in ((client, "/tickets/"), (client, QUEUE), (api, "/api/tickets/")):
            with CaptureQueriesContext(connection) as seen:
                assert who.get(url).status_code == 200
            # The rate limit forgets ended windows once per new window: a cost per minute, not
            # per order, that a slow run can see in one of the two measurements.
            housekeeping = [q for q in seen if q["sql"].startswith('DELETE FROM "api_ratecounter"')]
            counts.append(len(seen) - len(housekeeping))
        return counts

    client.force_login(admin_user)
    several(("3001", 4, 699), ("3002", 3, 800))
    queries()  # the first call of a token notes its use once
    few = queries()
    for n in range(3):
        numbers = [f"31{n}{i}" for i in range(4)]
        for number in numbers:
            make_order(number, late=4, fee_cents=650, name=f"Zed{n} Roe")
        Ticket.objects.create(thread_id=f"t{n}", order=Order.objects.get(number=numbers[0]))
        ticket = Ticket.objects.get(thread_id=f"t{n}")
        for i, number in enumerate(numbers[1:], start=1):
            TicketOrder.objects.create(
                ticket=ticket, order=Order.objects.get(number=number), position=i
            )
    assert queries() == few
    assert "· orders 3100, 3101, 3102, 3103</a>" in client.get("/tickets/").content.decode()


def test_a_three_order_ticket_reviewed_per_order_runs_to_its_end(transactional_db, client, manager):
    """One declined by policy (1043), one flagged (1049): the manager approves 1042 and rejects
    1049 on the page; one charge in the ledger and at the processor, one email."""
    ticket = three_orders()
    assert ticket.required_role == "manager"
    client.force_login(manager)
    form = {
        "interrupt_id": ticket.pending_interrupt_id,
        "orders": "1",
        "order-1042": "approve",
        "amount-1042": "6.99",
        "order-1049": "reject",
        "reason": "A fee this high needs the carrier's report.",
    }
    assert client.post(reverse("reviews:decide", args=[ticket.pk]), form).status_code == 302
    assert runner.advance(ticket.pk) == "refunded"
    assert runner.advance(ticket.pk) == "refunded"  # a second wake-up changes nothing

    charge = Charge.objects.get()
    assert (charge.ticket_id, charge.order.number, charge.amount_cents) == (ticket.pk, "1042", 699)
    assert charge.idempotency_key == f"{ticket.thread_id}:charge_card:1042:699"
    refunds = list(DemoProcessorRefund.objects.values_list("idempotency_key", "amount_cents"))
    assert refunds == [(charge.idempotency_key, 699)]
    email = Email.objects.get()
    assert email.key == f"{ticket.thread_id}:email"
    assert "Order 1042: $6.99" in email.body
    assert "1043" in email.body and "A fee this high needs the carrier's report." in email.body
    # Logged as what it was (issue 31 item 10), not as an approval with the rejection's reason.
    event = AuditEvent.objects.get(ticket=ticket, action="answer")
    assert event.amount_cents == 699
    assert Decision.objects.get().applied_at is not None

    html = client.get(reverse("reviews:ticket", args=[ticket.pk])).content.decode()
    assert f"Ticket {ticket.pk} · orders 1042, 1043, 1049" in html
    assert "1042 approved $6.99; 1049 rejected (A fee this high" in html
    assert "Order 1042 · $6.99" in html  # the charge names its order
    assert (
        "manager answered per order: approved $6.99 on 1042; rejected 1049 (told the customer: "
        "“A fee this high needs the carrier&#x27;s report.”)." in html
    )
    listed = client.get("/tickets/").content.decode()
    assert f"#{ticket.pk} · orders 1042, 1043, 1049" in listed
    dashboard = client.get("/dashboard/").content.decode()
    tiles = dict(re.findall(r'id="kpi-(\w+-refunded)"><span class="kpi">(\d+)', dashboard))
    assert tiles == {"tickets-refunded": "1", "orders-refunded": "1"}


def test_the_dashboard_counts_tickets_and_orders_apart(transactional_db, client, manager):
    ticket = agents_ticket()
    services.ticket_decide(
        ticket=ticket,
        interrupt_id=ticket.pending_interrupt_id,
        reviewer=manager,
        orders=services.review_answers(ticket, answer="approve"),
    )
    assert runner.advance(ticket.pk) == "refunded"
    client.force_login(manager)
    dashboard = client.get("/dashboard/").content.decode()
    tiles = dict(re.findall(r'id="kpi-(\w+-refunded)"><span class="kpi">(\d+)', dashboard))
    assert tiles == {"tickets-refunded": "1", "orders-refunded": "2"}


def test_bulk_approve_on_the_queue_names_every_order_of_a_ticket(transactional_db, client, agent):
    ticket = agents_ticket()
    client.force_login(agent)
    response = client.post(
        reverse("reviews:bulk_approve"),
        {"pick": [f"{ticket.pk}:{ticket.pending_interrupt_id}"]},
        headers=HTMX,
    )
    assert "Orders 1042, 1044, 1043: ✔ Approved $19.49" in response.content.decode()
    assert set(Decision.objects.get().orders) == {"1042", "1044"}


def test_a_refused_charge_comes_back_with_the_paid_order_shown_refunded(
    transactional_db, client, agent, manager, monkeypatch
):
    from refunds.flow.errors import PermanentGatewayError
    from refunds.payments import DemoGateway

    ticket = agents_ticket()
    services.ticket_decide(
        ticket=ticket,
        interrupt_id=ticket.pending_interrupt_id,
        reviewer=agent,
        orders=services.review_answers(ticket, answer="approve"),
    )
    charge = DemoGateway.charge

    def refuse_1044(self, *, idempotency_key, **kwargs):
        if ":1044:" in idempotency_key:
            raise PermanentGatewayError("card_declined: the issuer refused it")
        return charge(self, idempotency_key=idempotency_key, **kwargs)

    monkeypatch.setattr(DemoGateway, "charge", refuse_1044)
    assert runner.advance(ticket.pk) == "awaiting_review"  # back to a manager
    ticket.refresh_from_db()
    assert ticket.required_role == "manager"
    lines = {o["number"]: o for o in ticket.pending_payload["orders"]}
    assert (lines["1042"]["status"], lines["1044"]["status"]) == ("refunded", "open")

    client.force_login(manager)
    row = row_of(client.get(QUEUE).content.decode(), ticket)
    assert re.search(r'order-refunded[^"]*" data-order="1042"', row)
    assert lines["1042"]["receipt"] in row and "card_declined" in row
    assert 'name="order-1042"' not in row and 'name="order-1044"' in row
    with pytest.raises(services.RefundError, match="Order 1042 is refunded already"):
        services.ticket_decide(
            ticket=ticket,
            interrupt_id=ticket.pending_interrupt_id,
            reviewer=manager,
            orders=services.review_answers(
                ticket, answer="approve", orders={"1042": {"answer": "approve"}}
            ),
        )
    assert Decision.objects.count() == 1
    form = {
        "interrupt_id": ticket.pending_interrupt_id,
        "orders": "1",
        "order-1044": "reject",
        "reason": "The card issuer refuses this refund.",
    }
    client.post(reverse("reviews:decide", args=[ticket.pk]), form)
    assert Decision.objects.latest("id").orders == {
        "1044": {"answer": "reject", "reason": "The card issuer refuses this refund."}
    }
    assert runner.advance(ticket.pk) == "refunded"
    assert list(DemoProcessorRefund.objects.values_list("amount_cents", flat=True)) == [699]
    assert Email.objects.filter(ticket=ticket).count() == 1


def test_a_search_by_any_of_its_orders_finds_the_ticket(transactional_db, client, manager):
    from api.models import ApiToken

    ticket = three_orders()
    make_order("P00049", name="Other Person")
    client.force_login(manager)
    for q in ("1042", "1049", "#1043"):
        html = client.get("/tickets/", {"q": q}).content.decode()
        assert f"#{ticket.pk} · orders 1042, 1043, 1049" in html, q
    assert "No ticket matches" in client.get("/tickets/", {"q": "1050"}).content.decode()
    api = Client(headers={"Authorization": f"Token {ApiToken.issue(manager)[1]}"})
    found = api.get("/api/tickets/", {"order_number": "1049"}).json()
    assert [t["id"] for t in found["results"]] == [ticket.pk] and found["count"] == 1
