"""The API for a ticket of several orders (issue 18): the ticket's JSON lists its orders and,
while it waits, the review's line per order; the decision endpoint takes answers per order, and
a bad shape is the API's 400 with nothing recorded."""

from __future__ import annotations

import json

import pytest
from django.test import Client

from api.models import ApiToken
from refunds import enqueue, runner
from refunds.models import Charge, Decision, Email
from refunds.payments.demo import DemoProcessorRefund
from tests.test_desk_several import agents_ticket

URL = "/api/tickets/"


@pytest.fixture(autouse=True)
def _no_broker(monkeypatch):
    monkeypatch.setattr(enqueue, "wake", lambda ticket_id: True)  # the test advances itself


@pytest.fixture
def api(agent) -> Client:
    return Client(headers={"Authorization": f"Token {ApiToken.issue(agent)[1]}"})


def post_decision(api: Client, ticket_id: int, body) -> dict:
    response = api.post(
        f"{URL}{ticket_id}/decision/", data=json.dumps(body), content_type="application/json"
    )
    return {"status": response.status_code, **response.json()}


def test_the_ticket_lists_its_orders_and_the_reviews_line_per_order(transactional_db, api):
    ticket = agents_ticket()
    body = api.get(f"{URL}{ticket.pk}/").json()
    assert body["order_number"] == "1042"
    assert body["order_numbers"] == ["1042", "1044", "1043"]
    orders = body["pending_review"]["orders"]
    assert [(o["number"], o["status"], o["amount_cents"]) for o in orders] == [
        ("1042", "open", 699),
        ("1044", "open", 1250),
        ("1043", "declined", 0),
    ]
    assert "early" in orders[2]["declined_reason"] or orders[2]["declined_reason"]
    listed = api.get(URL).json()["results"]
    assert [t["order_numbers"] for t in listed] == [["1042", "1044", "1043"]]


def test_a_decision_per_order_is_recorded_and_carried_to_the_end(transactional_db, api):
    ticket = agents_ticket()
    body = {
        "interrupt_id": ticket.pending_interrupt_id,
        "answer": "approve",
        "orders": {
            "1042": {"answer": "approve"},
            "1044": {"answer": "reject", "reason": "On time."},
        },
    }
    made = post_decision(api, ticket.pk, body)
    assert made["status"] == 201
    assert made["answer"] == "approve" and "amount_cents" not in made
    assert made["orders"] == {
        "1042": {
            "answer": "approve",
            "parts": [{"shipping": True, "amount_cents": 699}],
            "amount_cents": 699,
        },
        "1044": {"answer": "reject", "reason": "On time."},
    }
    assert runner.advance(ticket.pk) == "refunded"
    assert list(Charge.objects.values_list("order__number", "amount_cents")) == [("1042", 699)]
    assert DemoProcessorRefund.objects.count() == 1 and Email.objects.count() == 1
    read = api.get(f"{URL}{ticket.pk}/").json()
    assert read["pending_review"] is None and read["decision"]["orders"] == made["orders"]


BAD = [
    ({"orders": []}, "orders"),
    ({"orders": {}}, "orders"),
    ({"orders": {"1042": "approve"}}, "orders.1042"),
    ({"orders": {"1042": {"answer": "maybe"}}}, "orders.1042.answer"),
    ({"orders": {"1042": {}}}, "orders.1042.answer"),
    ({"orders": {"1042": {"answer": "approve", "amount_cents": "6.99"}}}, "whole cents"),
    ({"orders": {"1042": {"answer": "approve", "amount_cents": 6.5}}}, "whole cents"),
    ({"orders": {"1042": {"answer": "approve", "amount_cents": True}}}, "whole cents"),
    ({"orders": {"1042": {"answer": "approve", "amount_cents": 0}}}, "orders.1042.amount_cents"),
    ({"orders": {"1042": {"answer": "approve", "tip": 1}}}, "Unknown field(s): tip"),
    ({"orders": {"1042": {"answer": "reject", "reason": 5}}}, "orders.1042.reason"),
]
# Well-formed, but the ticket's review refuses them: 422.
REFUSED = [
    ({"orders": {"9999": {"answer": "approve"}}}, "covers no order 9999"),
    ({"orders": {"1043": {"answer": "approve"}}}, "declined by policy"),
    ({"orders": {"1044": {"answer": "approve", "amount_cents": 5000}}}, "at most the $12.50"),
    ({"orders": {"1044": {"answer": "reject"}}}, "Give a reason for rejecting order 1044"),
    ({"amount_cents": 1000}, "lower an order's own amount"),
]


@pytest.mark.parametrize(("extra", "words"), BAD, ids=[w for _, w in BAD])
def test_a_bad_decision_per_order_is_a_400_and_records_nothing(transactional_db, api, extra, words):
    ticket = agents_ticket()
    body = {"interrupt_id": ticket.pending_interrupt_id, "answer": "approve", **extra}
    answer = post_decision(api, ticket.pk, body)
    assert answer["status"] == 400 and answer["code"] in ("invalid", "bad_request")
    assert words in answer["error"], answer
    assert not Decision.objects.exists()


@pytest.mark.parametrize(("extra", "words"), REFUSED, ids=[w for _, w in REFUSED])
def test_a_decision_the_review_refuses_is_a_422_and_records_nothing(
    transactional_db, api, extra, words
):
    ticket = agents_ticket()
    body = {"interrupt_id": ticket.pending_interrupt_id, "answer": "approve", **extra}
    answer = post_decision(api, ticket.pk, body)
    assert (answer["status"], answer["code"]) == (422, "unprocessable")
    assert words in answer["error"], answer
    assert not Decision.objects.exists()


def test_an_agent_lowering_an_orders_amount_is_a_403(transactional_db, api):
    ticket = agents_ticket()
    body = {
        "interrupt_id": ticket.pending_interrupt_id,
        "answer": "approve",
        "orders": {"1044": {"answer": "approve", "amount_cents": 1000}},
    }
    answer = post_decision(api, ticket.pk, body)
    assert answer["status"] == 403 and "Only a manager lowers" in answer["error"]
    assert not Decision.objects.exists()
