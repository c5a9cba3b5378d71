"""How the desk says amounts, durations and steps: the one place, Django-free."""

from decimal import Decimal
from itertools import groupby

from babel.numbers import format_currency, get_currency_precision

DESK = "USD"  # the desk's pages, its forms and its customers' emails say amounts in dollars
# Every other currency by its code, so "$" never means two things on one page ("899 JPY").
CODED = "#,##0.00 ¤¤"


def dollars(minor: int | None, currency: str = DESK) -> str:
    """An amount in minor units, as the desk writes it in every language: "$6.99", "899 JPY"."""
    # Templates hand it "" for a missing value (a payload the worker already cleared).
    if isinstance(minor, bool) or not isinstance(minor, int | float):
        return ""
    amount = Decimal(minor).scaleb(-get_currency_precision(currency))
    pattern = None if currency == DESK else CODED
    return format_currency(amount, currency, format=pattern, locale="en_US")


def days(n: int) -> str:
    return f"{n} day{'' if n == 1 else 's'}"


def numbers_words(numbers: list[str]) -> str:
    """ "order 1042" or "orders 1042, 1044"."""
    return ("order " if len(numbers) == 1 else "orders ") + ", ".join(numbers)


# What each node does, for people reading a thread's history (and the diagram's labels).
NODE_WORDS = {
    "__start__": "Ticket opened",
    "__end__": "Finished",
    # One path for one order or several (flow version 5): one check and one charge per order.
    "check_order": "Checked an order",
    "gather": "Gathered the checks",
    "decline": "Declined by policy",
    "triage": "Chose who reviews",
    "approve": "Review by a person",
    "charge_order": "Charged an order's refund",
    "payment_failed": "Charge refused, back to a manager",
    "settle_charges": "Settled the charges",
    "email": "Emailed the confirmation",
    "notify": "Told the customer why not",
    "received": "Told the customer a person will look",
    # Asking the customer (flow version 7): trail entries and node names.
    "ask": "A reviewer asked the customer",
    "ask_customer": "Emailed the question",
    "ask_failed": "The question could not be sent",
    "await_reply": "Waited on the customer",
    "reply": "The customer replied",
    "no_reply": "No reply from the customer",
    # A refund on return, and store credit as the customer's choice (issue 49).
    "ask_return": "Told the customer what to send back",
    "return_failed": "The return instructions could not be sent",
    "await_return": "Waited for the goods",
    "returned": "The goods came back",
    "not_returned": "Nothing came back",
    "return_flagged": "The return was flagged, back to a manager",
    "return_refused": "A word on the goods could not be applied",
    "offer_credit": "Offered store credit",
    "await_choice": "Waited on the customer's choice",
    "chose_credit": "The customer chose store credit",
    "chose_money": "Paid as money",
    # The one-order nodes of flow version 4 and before, in older threads' histories.
    "lookup": "Looked up the order",
    "fraud_check": "Checked for fraud signals",
    "history_check": "Read the customer's earlier refunds",
    "carrier_tracking": "Asked the carrier for tracking",
    "check_policy": "Checked the late-delivery policy",
    "charge_card": "Charged the refund",
}
# The per-order steps: their trail entries are "<node>:<number>".
ORDER_NODE_WORDS = {
    "check_order": ("Checked order", "Checked orders"),
    "charge_order": ("Charged the refund of order", "Charged the refunds of orders"),
}


def split_order_step(name: str) -> tuple[str, str]:
    """("check_order", "1042") for the trail entry "check_order:1042"; (name, "") otherwise."""
    node, _, number = name.partition(":")
    return (node, number) if number and node in ORDER_NODE_WORDS else (name, "")


def percent_of(cents: int, percent: int) -> int:
    """`percent` % of an amount, rounded down (the shop's bonus on store credit)."""
    return cents * percent // 100


def node_words(name: str) -> str:
    node, number = split_order_step(name)
    if number:
        return f"{ORDER_NODE_WORDS[node][0]} {number}"
    return NODE_WORDS.get(name, name.replace("_", " ").capitalize())


def and_words(items: list[str]) -> str:
    return items[0] if len(items) == 1 else ", ".join(items[:-1]) + " and " + items[-1]


def trail_words(nodes: list[str] | None) -> list[str]:
    """A step run again right after itself, or a fan-out's in a row, is said once."""
    said: list[str] = []
    steps = [split_order_step(name) for name in nodes or []]
    for node, run in groupby(steps, key=lambda step: step[0] if step[1] else ""):
        if node:
            numbers = list(dict.fromkeys(number for _, number in run))
            one, several = ORDER_NODE_WORDS[node]
            runs = [
                f"{one} {numbers[0]}" if len(numbers) == 1 else f"{several} {and_words(numbers)}"
            ]
        else:
            runs = [node_words(name) for name, _ in run]
        for words in runs:
            if not said or said[-1] != words:
                said.append(words)
    return said
