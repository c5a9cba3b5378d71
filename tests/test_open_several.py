"""Opening one ticket for several orders: the desk's "Open a ticket" form ("1042, 1044 1047"),
POST /api/tickets/ with order_numbers, the partial UNIQUE index on TicketOrder, and two tickets
racing for an overlapping order (threads with their own connections, as tests/test_desk_races.py
does; on SQLite and on PostgreSQL, whichever the suite runs on)."""

from __future__ import annotations

import json
import threading

import pytest
from django.db import IntegrityError, connection, transaction
from django.test import Client
from django.urls import reverse

from api.models import ApiToken, IdempotentRequest
from refunds import enqueue, services
from refunds.models import AuditEvent, Order, Ticket, TicketOrder
from refunds.services import tickets as ticket_service
from tests.conftest import make_order
from tests.test_desk_races import at_once

NEW = reverse("reviews:ticket_new")
URL = "/api/tickets/"
ROUNDS = 4


@pytest.fixture(autouse=True)
def no_broker(monkeypatch):
    monkeypatch.setattr(enqueue, "wake", lambda ticket_id: True)


@pytest.fixture
def three(db) -> list[Order]:
    return [make_order(n) for n in ("1042", "1044", "1047")]


def links() -> list[tuple[int, str, bool]]:
    return list(
        TicketOrder.objects.order_by("ticket_id", "position").values_list(
            "ticket_id", "order__number", "open"
        )
    )


# --- the desk's form -----------------------------------------------------------------------------
@pytest.mark.parametrize("typed", ["1042, 1044 1047", " #1042;1044,, 1047 ", "1042\n1044\t1047"])
def test_the_form_opens_one_ticket_for_the_orders_typed(client, agent, three, typed):
    client.force_login(agent)
    response = client.post(NEW, {"order_number": typed, "note": "all three late"})
    ticket = Ticket.objects.get()
    assert response.status_code == 302 and response["Location"] == f"/tickets/{ticket.pk}/"
    assert ticket.order_numbers() == ["1042", "1044", "1047"] and ticket.order == three[0]
    page = client.get(response["Location"]).content.decode()
    assert f"Opened ticket {ticket.pk} for orders 1042, 1044, 1047." in page


def test_the_form_with_htmx_says_which_orders_it_opened(client, agent, three):
    client.force_login(agent)
    response = client.post(NEW, {"order_number": "1042, 1044"}, headers={"HX-Request": "true"})
    ticket = Ticket.objects.get()
    assert f"ticket {ticket.pk}</a> for orders 1042, 1044." in response.content.decode()


def test_the_form_says_which_order_has_which_open_ticket_and_opens_none(client, agent, three):
    already = services.ticket_open(order_number="1044")
    client.force_login(agent)
    response = client.post(NEW, {"order_number": "1042, 1044 1047"})
    assert response["Location"] == f"/tickets/{already.pk}/"
    page = client.get(response["Location"]).content.decode()
    assert f"Order 1044 already has an open ticket ({already.pk}, new)" in page
    assert "No ticket was opened for 1042, 1047: type them again without 1044 to open one." in page
    assert Ticket.objects.count() == 1 and links() == [(already.pk, "1044", True)]


@pytest.mark.parametrize(
    ("typed", "says"),
    [
        ("1042, 9999", "There is no order 9999."),
        (" , ;; ", "Enter an order number."),
        ("1042, 2001", "A ticket covers one customer&#x27;s orders; 1042 is ana@example.com"),
        (", ".join(str(n) for n in range(3000, 3021)), "A ticket covers at most 20 orders (21"),
    ],
)
def test_the_form_refuses_bad_orders_keeps_what_was_typed_and_opens_nothing(
    client, agent, three, typed, says
):
    make_order("2001", name="Ben Okafor")
    client.force_login(agent)
    response = client.post(NEW, {"order_number": typed})
    assert response.status_code == 400
    html = response.content.decode()
    assert says in html
    assert f'value="{typed}"' in html
    assert not Ticket.objects.exists() and not TicketOrder.objects.exists()


# --- the API -------------------------------------------------------------------------------------
@pytest.fixture
def api(agent) -> Client:
    return Client(headers={"Authorization": f"Token {ApiToken.issue(agent)[1]}"})


def post(api: Client, body, **headers):
    data = body if isinstance(body, str) else json.dumps(body)
    return api.post(URL, data=data, content_type="application/json", headers=headers)


def test_the_api_opens_one_ticket_for_order_numbers_and_reads_them_back(api, three):
    response = post(api, {"order_numbers": ["1042", 1044, "1047"], "note": "late, all"})
    assert response.status_code == 201, response.content
    ticket = Ticket.objects.get()
    assert ticket.order_numbers() == ["1042", "1044", "1047"]
    read = api.get(response.json()["url"]).json()
    assert read["order_number"] == "1042"
    assert read["order_numbers"] == ["1042", "1044", "1047"]
    listed = api.get(URL).json()["results"][0]
    assert listed["order_numbers"] == ["1042", "1044", "1047"]


def test_the_api_still_opens_one_order_by_order_number(api, three):
    assert post(api, {"order_number": "1042"}).status_code == 201
    assert api.get(URL).json()["results"][0]["order_numbers"] == ["1042"]


@pytest.mark.parametrize(
    ("body", "says"),
    [
        ({"order_number": "1042", "order_numbers": ["1044"]}, "not both"),
        ({"note": "late"}, "Missing field: order_number (or order_numbers, a list)"),
        ({"order_numbers": "1042, 1044"}, "order_numbers must be a list"),
        ({"order_numbers": []}, "order_numbers: List should have at least 1 item"),
        ({"order_numbers": ["1042", None]}, "order_numbers.1 must be a string"),
        ({"order_numbers": ["1042", {"n": 1}]}, "order_numbers.1 must be a string"),
        ({"order_numbers": ["1042", True]}, "order_numbers.1 must be a string"),
        ({"order_numbers": ["1042", "  "]}, "order_numbers.1: Enter an order number."),
        (
            {"order_numbers": ["1042", "9" * 33]},
            "order_numbers.1: 999999999999999999999999999999999… is too long for an order number",
        ),
        (
            {"order_numbers": [str(n) for n in range(21)]},
            "order_numbers: List should have at most 20 items",
        ),
        ({"order_numbers": ["1042", "10\x0042"]}, "control characters"),
    ],
)
def test_the_api_refuses_bad_order_numbers_with_a_clear_400_and_opens_nothing(
    api, three, body, says
):
    make_order("2001", name="Ben Okafor")
    response = post(api, body)
    assert response.status_code == 400, response.content
    assert says in response.json()["error"], response.json()
    assert not Ticket.objects.exists() and not TicketOrder.objects.exists()


@pytest.mark.parametrize(
    ("body", "says"),
    [
        ({"order_numbers": ["1042", "9999"]}, "There is no order 9999."),
        ({"order_numbers": ["1042", "2001"]}, "A ticket covers one customer's orders"),
    ],
)
def test_the_api_refuses_orders_the_desk_refuses_with_a_422_and_opens_nothing(
    api, three, body, says
):
    make_order("2001", name="Ben Okafor")
    response = post(api, body)
    assert response.status_code == 422, response.content
    assert says in response.json()["error"], response.json()
    assert not Ticket.objects.exists() and not TicketOrder.objects.exists()


def test_the_api_409_names_the_overlapping_order_and_its_ticket(api, three):
    already = services.ticket_open(order_numbers=["1044", "1047"])
    response = post(api, {"order_numbers": ["1042", "1047"]})
    assert response.status_code == 409
    body = response.json()
    assert body["order_number"] == "1047" and body["ticket"]["id"] == already.pk
    assert f"Order 1047 already has an open ticket ({already.pk}" in body["error"]
    assert Ticket.objects.count() == 1


def test_the_api_keeps_its_idempotency_for_order_numbers(api, three):
    key = {"Idempotency-Key": "hd-several"}
    first = post(api, {"order_numbers": ["1042", "1044"]}, **key)
    again = post(api, {"order_numbers": ["1042", "1044"]}, **key)
    assert first.status_code == again.status_code == 201 and first.json() == again.json()
    other = post(api, {"order_numbers": ["1042", "1047"]}, **key)
    assert other.status_code == 422 and "different request body" in other.json()["error"]
    assert Ticket.objects.count() == 1 and IdempotentRequest.objects.count() == 1
    # A second key for an overlapping order: the 409 is kept under that key too.
    conflict = post(api, {"order_numbers": ["1047", "1044"]}, **{"Idempotency-Key": "hd-2"})
    replay = post(api, {"order_numbers": ["1047", "1044"]}, **{"Idempotency-Key": "hd-2"})
    assert conflict.status_code == replay.status_code == 409
    assert conflict.json() == replay.json() and conflict.json()["order_number"] == "1044"


# --- the database's partial UNIQUE index ---------------------------------------------------------
def test_the_index_refuses_a_second_open_link_for_an_order(db, three):
    first = services.ticket_open(order_numbers=["1042", "1044"])
    other = services.ticket_open(order_number="1047")
    with pytest.raises(IntegrityError), transaction.atomic():
        TicketOrder.objects.create(ticket=other, order=three[1], position=1)  # 1044, open
    TicketOrder.objects.create(ticket=other, order=three[1], position=1, open=False)  # closed: ok
    assert links() == [
        (first.pk, "1042", True),
        (first.pk, "1044", True),
        (other.pk, "1047", True),
        (other.pk, "1044", False),
    ]


def test_a_finished_tickets_link_does_not_block_a_new_ticket_for_its_order(db, three):
    done = services.ticket_open(order_numbers=["1042", "1044"])
    Ticket.objects.filter(pk=done.pk).update(status=Ticket.Status.REFUNDED)
    assert TicketOrder.objects.filter(ticket=done, open=True).count() == 2  # closed lazily
    new = services.ticket_open(order_numbers=["1044", "1047"])
    assert new.order_numbers() == ["1044", "1047"]
    assert links() == [
        (done.pk, "1042", True),  # nobody needed 1042 yet
        (done.pk, "1044", False),  # closed by the ticket that needed it
        (new.pk, "1044", True),
        (new.pk, "1047", True),
    ]


# --- two tickets racing for an overlapping order ------------------------------------------------
@pytest.mark.parametrize("past_the_check", [False, True], ids=["as-it-comes", "both-past-check"])
def test_two_tickets_racing_for_an_overlapping_order_one_wins(
    transactional_db, monkeypatch, past_the_check
):
    """[A, B] and [B, C] at once, each on its own connection: one ticket, the other told
    TicketAlreadyOpen naming B and the winner's ticket, and nothing of the loser left. With
    `past_the_check` both pass ticket_open's look for an open ticket first (as if each read
    before the other wrote): then the partial UNIQUE index alone picks the winner."""
    if past_the_check:
        real = ticket_service._open_ticket_of
        local = threading.local()

        def first_look_finds_none(orders):
            if not getattr(local, "looked", False):
                local.looked = True
                return None
            return real(orders)

        monkeypatch.setattr(ticket_service, "_open_ticket_of", first_look_finds_none)
    for n in range(ROUNDS):
        a, b, c = (f"7{n}{i}" for i in (1, 2, 3))
        for number in (a, b, c):
            make_order(number)

        def open_(numbers):
            def call():
                try:
                    return services.ticket_open(order_numbers=numbers)
                except services.TicketAlreadyOpen as exc:
                    return exc

            return call

        results = at_once(open_([a, b]), open_([b, c]))
        won = [r for r in results if isinstance(r, Ticket)]
        lost = [r for r in results if isinstance(r, services.TicketAlreadyOpen)]
        assert (len(won), len(lost)) == (1, 1), results
        winner, refusal = won[0], lost[0]
        assert refusal.number == b and refusal.ticket.pk == winner.pk
        assert f"Order {b} already has an open ticket ({winner.pk}" in str(refusal)
        mine = Ticket.objects.filter(order__number__in=[a, b, c])
        assert list(mine.values_list("pk", flat=True)) == [winner.pk]
        rows = TicketOrder.objects.filter(order__number__in=[a, b, c])
        assert sorted(rows.values_list("ticket_id", "order__number")) == sorted(
            (winner.pk, x) for x in winner.order_numbers()
        )
        assert winner.order_numbers() in ([a, b], [b, c])
        assert not AuditEvent.objects.exclude(ticket=winner).filter(
            ticket__order__number__in=[a, b, c]
        )
    connection.close()
