"""POST /api/orders/ with what an order holds: its lines, total and amount paid, read by the
import's own reader; a refused order changes nothing and its reason names the line."""

from __future__ import annotations

import json

import pytest
import yaml
from django.contrib.auth.models import Group, User
from django.test import Client

from api.models import ApiToken
from refunds.models import Order, OrderLine

URL = "/api/orders/"


def order(number: str = "7101", **changes) -> dict:
    return {
        "order_number": number,
        "customer_name": "Ana Souza",
        "customer_email": "ana@example.com",
        "currency": "USD",
        "shipping_fee": "4.99",
        "promised_on": "2026-11-02",
        "delivered_on": "2026-11-06",
        "payment_reference": f"pi_{number}",
        "total": "74.98",
        "paid": "74.98",
        "lines": [
            {"line_id": "1", "sku": "CHG-65", "title": "USB-C charger", "unit_price": "29.99",
             "quantity": 1, "tax": "2.40"},
            {"line_id": "2", "title": "Laptop sleeve", "unit_price": 18.8, "quantity": 2},
        ],
        **changes,
    }  # fmt: skip


def with_line(index: int, **changes) -> dict:
    sent = order()
    sent["lines"][index] = {**sent["lines"][index], **changes}
    return sent


@pytest.fixture
def api(db) -> Client:
    shop = User.objects.create_user("shop")
    shop.groups.add(Group.objects.get(name="Shop integrations"))
    return Client(headers={"Authorization": f"Bearer {ApiToken.issue(shop)[1]}"})


def push(client: Client, *orders: dict):
    body = json.dumps({"orders": list(orders)})
    return client.post(URL, data=body, content_type="application/json")


def held(number: str | None = None) -> list[tuple]:
    """Every order and every line as stored (of one order, with `number`)."""
    orders, lines = Order.objects.all(), OrderLine.objects.all()
    if number:
        orders, lines = orders.filter(number=number), lines.filter(order__number=number)
    return [
        *orders.order_by("number").values_list(),
        *lines.order_by("order__number", "id").values_list(),
    ]


def test_a_pushed_order_with_lines_is_stored_with_them(api):
    response = push(api, order())

    assert response.status_code == 200, response.json()
    assert response.json()["created"] == 1
    stored = Order.objects.get()
    assert (stored.total_cents, stored.paid_cents) == (7498, 7498)
    assert list(
        stored.lines.values_list(
            "line_id", "sku", "title", "unit_price_cents", "quantity", "tax_cents"
        )
    ) == [("1", "CHG-65", "USB-C charger", 2999, 1, 240), ("2", "", "Laptop sleeve", 1880, 2, 0)]


def test_the_same_order_pushed_again_is_unchanged(api):
    push(api, order())
    before = held()

    response = push(api, order())

    assert response.json()["unchanged"] == 1
    assert held() == before


REFUSALS = [
    (with_line(0, unit_price=None), "lines[0]: missing unit_price", "lines[0].unit_price"),
    (with_line(1, quantity=None), "lines[1]: missing quantity", "lines[1].quantity"),
    (with_line(1, quantity=0), "lines[1]: quantity must be 1 or more, not 0", "lines[1].quantity"),
    (
        with_line(1, quantity=-1),
        "lines[1]: quantity must be 1 or more, not -1",
        "lines[1].quantity",
    ),
    (
        with_line(1, quantity="2"),
        "lines[1]: quantity must be a whole number, like 2: '2'",
        "lines[1].quantity",
    ),
    (with_line(1, line_id="1"), "lines[1]: line_id '1' is also lines[0]'s", "lines[1].line_id"),
    (order(total="80.00"), "total 80.00 USD does not add up", "total"),
    (order(paid="75.00"), "paid 75.00 USD is more than the total 74.98 USD", "paid"),
]


@pytest.mark.parametrize(("sent", "reason", "field"), REFUSALS, ids=[r for _, r, _ in REFUSALS])
def test_a_refused_order_changes_nothing_and_its_reason_names_the_line(api, sent, reason, field):
    push(api, order())
    before = held()

    response = push(api, sent, order("7102"))

    assert response.status_code == 200
    refused, taken = response.json()["results"]
    assert refused["result"] == "refused" and reason in refused["reason"], refused
    assert refused["field"] == field and taken["field"] == ""
    assert taken["result"] == "created"  # the other order of the request goes in, as ever
    assert held("7101") == before


def test_the_schema_states_the_lines_of_a_pushed_order(api):
    response = api.get("/api/schema/")
    text = response.content.decode()
    schema = yaml.safe_load(text)

    post = schema["paths"]["/api/orders/"]["post"]
    ref = post["requestBody"]["content"]["application/json"]["schema"]["$ref"]
    line = schema["components"]["schemas"][ref.rsplit("/", 1)[1]]["properties"]["orders"]["items"]
    assert "lines" in line["description"] and "paid" in line["description"]
    assert line["example"]["lines"][0]["quantity"] == 2


def test_a_refused_order_field_of_its_own_is_named_too(api):
    response = push(api, order(shipping_fee="-1.00"), order("7102", currency="XYZ"))

    fields = [r["field"] for r in response.json()["results"]]
    assert fields == ["shipping_fee", "currency"]
