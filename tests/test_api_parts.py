"""The decision API's `parts` (issue 29): a reviewer refunds units of an order's lines, its
shipping fee or the whole order; a bad part is refused (400 for its shape, 422 when the order's
review refuses it, as for an amount above what is asked) and nothing is recorded."""

from __future__ import annotations

import json
import re

import pytest
from django.test import Client
from django.urls import reverse

from api.models import ApiToken
from refunds import enqueue, policy, runner, services
from refunds.models import Charge, ChargePart, Decision, OrderLine, Ticket
from tests.conftest import make_order

URL = "/api/tickets/"


@pytest.fixture(autouse=True)
def _no_broker(monkeypatch):
    monkeypatch.setattr(enqueue, "wake", lambda ticket_id: True)  # the test advances itself


@pytest.fixture
def api(manager) -> Client:
    return Client(headers={"Authorization": f"Token {ApiToken.issue(manager)[1]}"})


@pytest.fixture
def vase(late_order) -> OrderLine:
    return OrderLine.objects.create(
        order=late_order,
        line_id="L1",
        sku="VASE-CER",
        title="Ceramic vase",
        unit_price_cents=2400,
        quantity=2,
    )


@pytest.fixture
def ticket(transactional_db, agent, vase) -> Ticket:
    opened = services.ticket_open(
        order_number="1042",
        opened_by=agent,
        reason=policy.DAMAGED,
        note="Customer: one of the vases arrived smashed",
    )
    assert runner.advance(opened.pk) == "awaiting_review"
    return Ticket.objects.get(pk=opened.pk)


def decide(api: Client, ticket: Ticket, parts) -> dict:
    body = {
        "interrupt_id": ticket.pending_interrupt_id,
        "answer": "approve",
        "orders": {"1042": {"answer": "approve", "parts": parts}},
    }
    response = api.post(
        f"{URL}{ticket.pk}/decision/", data=json.dumps(body), content_type="application/json"
    )
    return {"status": response.status_code, **response.json()}


def test_the_review_lists_the_orders_lines_and_the_proposal(api, ticket, vase):
    (order,) = api.get(f"{URL}{ticket.pk}/").json()["pending_review"]["orders"]
    assert order["parts"] == [{"line": vase.pk, "quantity": 2, "amount_cents": 4800}]
    assert order["parts_why"] == "The customer reports Ceramic vase as damaged."
    assert [(line["id"], line["quantity"]) for line in order["order"]["lines"]] == [(vase.pk, 2)]


def test_a_manager_refunds_one_vase_for_less_and_the_shipping(api, ticket, vase, smtp):
    made = decide(
        api,
        ticket,
        [
            {"line": vase.pk, "quantity": 1, "amount_cents": 2000, "restock": False},
            {"shipping": True},
        ],
    )
    assert made["status"] == 201, made
    assert made["orders"]["1042"]["amount_cents"] == 2699
    assert runner.advance(ticket.pk) == "refunded"
    assert list(Charge.objects.values_list("amount_cents", flat=True)) == [2699]
    assert sorted(
        ChargePart.objects.values_list("line_id", "quantity", "amount_cents", "restock"),
        key=lambda r: r[0] or 0,
    ) == [(None, 0, 699, False), (vase.pk, 1, 2000, False)]
    (mail,) = smtp.delivered  # the customer's email, as they read it
    assert (
        "We have started a refund of $26.99 of the $48.00 you asked for, for order 1042:"
        in mail.body
    )
    assert "- 1 x Ceramic vase, $20.00 — no need to send it back" in mail.body
    assert "- Shipping, $6.99" in mail.body


def test_the_whole_order_is_every_line_left_and_the_shipping(api, ticket, vase):
    made = decide(api, ticket, [{"whole_order": True}])
    assert made["status"] == 201, made
    assert runner.advance(ticket.pk) == "refunded"
    assert list(Charge.objects.values_list("amount_cents", flat=True)) == [4800 + 699]


BAD = [
    ([], "parts"),
    ([{"line": 1, "quantity": 0}], "quantity"),
    ([{"line": 1, "quantity": -1}], "quantity"),
    ([{"shipping": True, "amount_cents": 0}], "amount_cents"),
    ([{"line": 1, "quantity": 1, "colour": "red"}], "Unknown field(s): colour"),
    ([{"shipping": "true"}], "shipping"),  # a JSON boolean, not text that reads as one
    (["vase"], "parts"),
]


@pytest.mark.parametrize(("parts", "words"), BAD, ids=[w + str(i) for i, (_, w) in enumerate(BAD)])
def test_a_badly_shaped_part_is_a_400_and_records_nothing(api, ticket, parts, words):
    answer = decide(api, ticket, parts)
    assert answer["status"] == 400 and words in answer["error"], answer
    assert not Decision.objects.exists()


def refused(vase: OrderLine, other: OrderLine) -> list:
    line = {"line": vase.pk, "quantity": 1}
    return [
        ([{"line": other.pk, "quantity": 1}], f"Order 1042 has no line {other.pk}"),
        ([{"line": vase.pk, "quantity": 3}], "only 2 of the 2 x Ceramic vase are left"),
        ([line | {"amount_cents": 2401}], "at most $24.00"),
        ([line, line], "Ceramic vase is given twice"),
        ([{"shipping": True}, {"shipping": True}], "shipping fee is given twice"),
        ([{"shipping": True, "amount_cents": 700}], "at most $6.99"),
        ([{"whole_order": True}, {"shipping": True}], "give it alone"),
    ]


@pytest.mark.parametrize("case", range(7))
def test_a_part_the_order_does_not_allow_is_refused_and_records_nothing(api, ticket, vase, case):
    other = OrderLine.objects.create(
        order=make_order("2001"),
        line_id="L9",
        title="Desk lamp",
        unit_price_cents=100,
        quantity=1,
    )
    parts, words = refused(vase, other)[case]
    answer = decide(api, ticket, parts)
    assert (answer["status"], answer["code"]) == (422, "unprocessable"), answer
    assert words in answer["error"], answer
    assert not Decision.objects.exists()


def test_the_email_tells_no_one_to_keep_an_item_that_never_came(
    api, transactional_db, agent, vase, smtp
):
    opened = services.ticket_open(
        order_number="1042",
        opened_by=agent,
        reason=policy.NOT_RECEIVED,
        note="Customer: the two vases never came",
    )
    assert runner.advance(opened.pk) == "awaiting_review"
    ticket = Ticket.objects.get(pk=opened.pk)

    made = decide(api, ticket, [{"line": vase.pk, "quantity": 2}])

    assert made["status"] == 201, made
    assert runner.advance(ticket.pk) == "refunded"
    (mail,) = smtp.delivered
    assert "- 2 x Ceramic vase, $48.00" in mail.body.splitlines()
    assert "send it back" not in mail.body


# --- the review form, without JavaScript ---------------------------------------------------------
def test_the_ticket_page_ticks_the_proposal_and_a_plain_post_refunds_one_vase_of_two(
    client, manager, ticket, vase, smtp
):
    client.force_login(manager)
    page = client.get(reverse("reviews:ticket", args=[ticket.pk])).content.decode()
    assert "The customer reports Ceramic vase as damaged." in page
    qty = f'name="part-1042-qty-{vase.pk}" id="ticket-decide-{ticket.pk}-qty-{vase.pk}" value="2"'
    assert qty in page  # the proposal: both vases
    shipping = re.search(r'<input[^>]*name="part-1042-shipping"[^>]*>', page)
    assert shipping and "checked" not in shipping.group()  # shipping not ticked
    answer = client.post(
        reverse("reviews:decide", args=[ticket.pk]),
        {
            "interrupt_id": ticket.pending_interrupt_id,
            "approve": "1",
            "parts-1042": "1",
            f"part-1042-qty-{vase.pk}": "1",
        },
    )
    assert answer.status_code == 302, answer.content.decode()[:500]
    assert runner.advance(ticket.pk) == "refunded"
    assert list(
        ChargePart.objects.values_list("line_id", "quantity", "amount_cents", "restock")
    ) == [(vase.pk, 1, 2400, False)]
    (mail,) = smtp.delivered
    assert "- 1 x Ceramic vase, $24.00 — no need to send it back" in mail.body


def test_a_form_that_ticks_nothing_is_refused_and_records_nothing(client, manager, ticket, vase):
    client.force_login(manager)
    answer = client.post(
        reverse("reviews:decide", args=[ticket.pk]),
        {
            "interrupt_id": ticket.pending_interrupt_id,
            "approve": "1",
            "parts-1042": "1",
            f"part-1042-qty-{vase.pk}": "0",
        },
        headers={"HX-Request": "true"},
    )
    assert answer.status_code == 400 and "tick what to refund" in answer.content.decode()
    assert not Decision.objects.exists()


@pytest.mark.parametrize("field", ["quantity", "line"])
def test_a_line_or_quantity_given_as_a_string_is_refused_like_an_amount(api, ticket, vase, field):
    part = {"line": vase.pk, "quantity": 1} | {field: str({"line": vase.pk, "quantity": 1}[field])}
    answered = decide(api, ticket, [part])
    assert answered["status"] == 400 and "whole number" in json.dumps(answered)
    assert not Decision.objects.exists()


def test_the_decisions_amount_given_as_a_string_is_refused_like_a_parts(api, ticket):
    body = {
        "interrupt_id": ticket.pending_interrupt_id,
        "answer": "approve",
        "amount_cents": "2000",
    }
    response = api.post(
        f"{URL}{ticket.pk}/decision/", data=json.dumps(body), content_type="application/json"
    )
    assert response.status_code == 400 and "whole cents" in response.json()["error"]
    assert not Decision.objects.exists()
