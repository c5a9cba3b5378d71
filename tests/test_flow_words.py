"""The desk's words for the steps of a thread (refunds/flow/words.py): the ticket page's trail and
the history page say a ticket of several orders' fan-out with its orders."""

from __future__ import annotations

from refunds.flow.words import node_words, split_order_step, trail_words

SEVERAL = [
    "check_order:1042",
    "check_order:1044",
    "check_order:1047",
    "gather",
    "triage",
    "approve",
    "charge_order:1042",
    "charge_order:1044",
    "settle_charges",
    "email",
]


def test_the_fan_out_nodes_have_words():
    assert node_words("check_order") == "Checked an order"
    assert node_words("gather") == "Gathered the checks"
    assert node_words("charge_order") == "Charged an order's refund"
    assert node_words("settle_charges") == "Settled the charges"


def test_a_per_order_step_is_said_with_its_order():
    assert node_words("check_order:1042") == "Checked order 1042"
    assert node_words("charge_order:1044") == "Charged the refund of order 1044"
    assert split_order_step("charge_order:1044") == ("charge_order", "1044")
    assert split_order_step("lookup") == ("lookup", "")
    assert split_order_step("triage:x") == ("triage:x", "")  # not a per-order step


def test_a_fan_out_in_a_row_is_said_once_with_its_orders():
    assert trail_words(SEVERAL) == [
        "Checked orders 1042, 1044 and 1047",
        "Gathered the checks",
        "Chose who reviews",
        "Review by a person",
        "Charged the refunds of orders 1042 and 1044",
        "Settled the charges",
        "Emailed the confirmation",
    ]


def test_a_charge_asked_again_after_a_refusal_is_said_again():
    trail = ["charge_order:1042", "charge_order:1044", "payment_failed", "approve"]
    trail += ["charge_order:1044", "settle_charges"]
    assert trail_words(trail) == [
        "Charged the refunds of orders 1042 and 1044",
        "Charge refused, back to a manager",
        "Review by a person",
        "Charged the refund of order 1044",
        "Settled the charges",
    ]


def test_one_orders_trail_reads_as_before():
    trail = ["lookup", "fraud_check", "history_check", "history_check", "check_policy", "triage"]
    assert trail_words(trail) == [
        "Looked up the order",
        "Checked for fraud signals",
        "Read the customer's earlier refunds",
        "Checked the late-delivery policy",
        "Chose who reviews",
    ]
    assert trail_words(None) == [] and trail_words([]) == []
