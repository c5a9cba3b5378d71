"""A ticket of several orders in the refund graph on its own (no Django): the per-order checks fan
out with Send, one review answers per order, the charges fan out with a key per order, one email
lists what was refunded and what was not."""

from __future__ import annotations

import re
from typing import Any

import pytest
from langgraph.checkpoint.memory import InMemorySaver
from langgraph.store.memory import InMemoryStore
from langgraph.types import Command

from refunds import policy
from refunds.flow import nodes
from refunds.flow.errors import PermanentGatewayError
from refunds.flow.graph import build_graph
from refunds.flow.state import Collaborators, OrderFacts
from tests.reviewing import in_one_shape
from tests.test_graph import FakeMailer, order_facts

TICKET = "refund-1042-several"


class Gateway:
    """The ledger-wrapped gateway as a fake: one receipt per key, errors queued per order."""

    def __init__(self, refuse: dict[str, str] | None = None):
        self.calls: list[dict[str, Any]] = []
        self.receipts: dict[str, str] = {}
        self.refuse = dict(refuse or {})

    def __call__(self, *, key: str, amount_cents: int, order_number: str = "", parts=None) -> str:
        self.calls.append({"key": key, "amount_cents": amount_cents, "order": order_number})
        if order_number in self.refuse:
            raise PermanentGatewayError(self.refuse.pop(order_number))
        return self.receipts.setdefault(key, f"rcpt_{order_number}")


class Desk:
    def __init__(self, orders: list[OrderFacts], gateway: Gateway | None = None):
        self.orders = {o["number"]: o for o in orders}
        self.gateway = gateway or Gateway()
        self.mailer = FakeMailer()
        self.store = InMemoryStore()
        self.graph = build_graph().compile(checkpointer=InMemorySaver(), store=self.store)
        self.config = {"configurable": {"thread_id": TICKET}}
        self.context = Collaborators(
            find_order=self.orders.get,
            pay=self.gateway,
            send_mail=self.mailer,
            agent_limit_cents=policy.DEFAULT_AGENT_LIMIT_CENTS,
            charge_retry_seconds=45.0,
        )

    def start(self) -> dict:
        numbers = list(self.orders)
        return self.graph.invoke(
            {"ticket_key": TICKET, "order_number": numbers[0], "order_numbers": numbers},
            self.config,
            context=self.context,
            durability="sync",
        )

    def pending(self):
        (interrupt,) = self.graph.get_state(self.config).interrupts
        return interrupt

    def answer(self, value: dict) -> dict:
        interrupt = self.pending()
        return self.graph.invoke(
            Command(resume={interrupt.id: in_one_shape(interrupt.value, value)}),
            self.config,
            context=self.context,
            durability="sync",
        )


def three_orders() -> list[OrderFacts]:
    return [
        order_facts(number="1042", late=4, fee_cents=699),  # late: refundable
        order_facts(number="1043", late=0, fee_cents=899),  # on time: declined by policy
        order_facts(number="1049", late=3, fee_cents=15_000),  # late, fee above $100: flagged
    ]


def test_three_orders_fan_out_one_declined_one_flagged_one_review_for_a_manager():
    desk = Desk(three_orders())
    desk.start()
    state = desk.graph.get_state(desk.config)
    trail = state.values["trail"]
    # One check per order, each in its own task, then one gather.
    assert sorted(t for t in trail if t.startswith("check_order:")) == [
        "check_order:1042",
        "check_order:1043",
        "check_order:1049",
    ]
    assert "lookup" not in trail and trail.count("gather") == 1
    payload = desk.pending().value
    assert payload["required_role"] == "manager"  # the flag, and $156.99 is over the limit
    assert payload["amount_cents"] == 699 + 15_000
    lines = {o["number"]: o for o in payload["orders"]}
    assert [o["number"] for o in payload["orders"]] == ["1042", "1043", "1049"]
    assert lines["1043"]["status"] == "declined" and lines["1043"]["amount_cents"] == 0
    assert "on time" in lines["1043"]["declined_reason"]
    assert lines["1049"]["flags"] and not lines["1042"]["flags"]
    assert payload["action_request"]["args"] == {"orders": ["1042", "1049"], "amount_cents": 15_699}
    assert "1043 is declined by policy" in payload["description"]


def test_per_order_answers_charge_each_approved_order_once_and_one_email_lists_all():
    desk = Desk(three_orders())
    desk.start()
    desk.answer(
        {
            "answer": "approve",
            "reviewer": "manager",
            "orders": {
                "1042": {"answer": "approve", "amount_cents": 500},  # lowered
                "1049": {"answer": "reject", "reason": "The fee looks wrong."},
            },
        }
    )
    values = desk.graph.get_state(desk.config).values
    assert values["outcome"] == "refunded" and values["amount_cents"] == 500
    assert desk.gateway.calls == [
        {"key": f"{TICKET}:charge_card:1042:500", "amount_cents": 500, "order": "1042"}
    ]
    (mail,) = desk.mailer.sent
    assert mail["key"] == f"{TICKET}:email"
    # Less than asked is said so, with the total.
    assert "We have started refunding part of the shipping fee:" in mail["body"]
    assert "Order 1042: $5.00 of the $6.99 asked (receipt rcpt_1042)" in mail["body"]
    assert "Order 1043: Your order arrived on time" in mail["body"]
    assert "Order 1049: The fee looks wrong." in mail["body"]
    # The customer's memory has one record per refunded order.
    records = desk.store.search(nodes.customer_namespace("ana.souza@example.com"))
    assert [(r.key, r.value["amount_cents"]) for r in records] == [(f"{TICKET}:1042", 500)]


def test_approve_all_charges_every_open_order_in_parallel_tasks():
    desk = Desk(three_orders())
    desk.start()
    desk.answer({"answer": "approve", "reviewer": "manager"})
    keys = sorted(c["key"] for c in desk.gateway.calls)
    assert keys == [f"{TICKET}:charge_card:1042:699", f"{TICKET}:charge_card:1049:15000"]
    trail = desk.graph.get_state(desk.config).values["trail"]
    assert {"charge_order:1042", "charge_order:1049"} <= set(trail)
    assert trail[-2:] == ["settle_charges", "email"]
    assert len(desk.mailer.sent) == 1


def test_reject_all_tells_the_customer_once_with_each_orders_reason():
    desk = Desk(three_orders())
    desk.start()
    desk.answer({"answer": "reject", "reason": "Not eligible.", "reviewer": "manager"})
    values = desk.graph.get_state(desk.config).values
    assert values["outcome"] == "rejected" and desk.gateway.calls == []
    (mail,) = desk.mailer.sent
    assert mail["key"] == f"{TICKET}:notify"
    assert "Order 1042: Not eligible." in mail["body"]
    assert "Order 1043: Your order arrived on time" in mail["body"]


def test_every_order_declined_by_policy_ends_in_one_notify_without_a_review():
    desk = Desk(
        [order_facts(number="1043", late=0), order_facts(number="1046", late=-1, fee_cents=500)]
    )
    desk.start()
    values = desk.graph.get_state(desk.config).values
    assert values["outcome"] == "declined" and not desk.graph.get_state(desk.config).interrupts
    (mail,) = desk.mailer.sent
    assert "1043" in mail["body"] and "1046" in mail["body"]


@pytest.mark.parametrize(
    "orders, error",
    [
        ({"1043": {"answer": "approve", "parts": [{"shipping": True}]}}, "no open order 1043"),
        (
            {"1042": {"answer": "approve", "parts": [{"shipping": True, "amount_cents": 700}]}},
            r"at most \$6.99",
        ),
        ({"1042": {"answer": "maybe"}}, "approve or reject for order 1042"),
    ],
)
def test_an_answer_the_review_cannot_apply_comes_back_to_the_review_and_moves_no_money(
    orders, error
):
    """The review node checks the answer again (the order may have changed since the desk
    checked it): one it cannot apply is never a failed ticket, the review comes back saying why."""
    desk = Desk(three_orders())
    desk.start()
    first = desk.pending()
    desk.graph.invoke(
        Command(resume={first.id: {"answer": "approve", "reviewer": "manager", "orders": orders}}),
        desk.config,
        context=desk.context,
        durability="sync",
    )
    assert desk.gateway.calls == [] and desk.mailer.sent == []
    again = desk.pending()
    assert again.id != first.id
    said = again.value["description"]
    assert "The decision of manager could not be applied" in said and re.search(error, said)
    desk.answer({"answer": "approve", "reviewer": "manager"})
    values = desk.graph.get_state(desk.config).values
    assert values["outcome"] == "refunded" and not values.get("review_error")
    assert len(desk.mailer.sent) == 1


def test_a_refused_charge_goes_back_to_a_manager_and_the_paid_order_stays_paid_once():
    desk = Desk(three_orders(), Gateway(refuse={"1049": "card expired"}))
    desk.start()
    desk.answer({"answer": "approve", "reviewer": "manager"})
    payload = desk.pending().value
    lines = {o["number"]: o for o in payload["orders"]}
    assert lines["1042"]["status"] == "refunded" and lines["1049"]["status"] == "open"
    assert "card expired" in payload["description"] and payload["required_role"] == "manager"
    desk.answer({"answer": "approve", "reviewer": "manager"})
    values = desk.graph.get_state(desk.config).values
    assert values["outcome"] == "refunded" and values["amount_cents"] == 15_699
    paid = [c["key"] for c in desk.gateway.calls]
    assert paid.count(f"{TICKET}:charge_card:1042:699") == 1  # not charged again
    assert paid.count(f"{TICKET}:charge_card:1049:15000") == 2  # refused, then paid
    assert len(desk.mailer.sent) == 1
