"""A reviewer's answer in its one shape: per open order, approve with parts or reject with a
reason. `checked` is the one check, run by the decision service before it records an answer and
by the review node before it applies one, so what the desk accepts the flow applies. No Django."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from refunds import policy
from refunds.flow import parts as refund_parts
from refunds.flow.state import OrderAnswer, Part, ReviewOrder
from refunds.flow.words import dollars

REASON_MAX = 1000  # characters of a reason for the customer (the API's and the forms' limit)
FIELDS = frozenset(
    {"answer", "parts", "reason", "amount_cents", "on_return", "offer_credit", "credit"}
)


def open_orders(review: Sequence[ReviewOrder]) -> dict[str, ReviewOrder]:
    """The review's orders that wait on an answer, by number, in the review's order."""
    return {str(o["number"]): o for o in review if o.get("status") == "open"}


def proposal(order: ReviewOrder) -> list[Part]:
    """What the review proposes to refund of one open order."""
    return list(order.get("parts") or [])


def expanded(
    review: Sequence[ReviewOrder],
    *,
    answer: str = "",
    reason: str = "",
    amount_cents: object = None,
    orders: object = None,
) -> dict[str, dict[str, Any]]:
    """The forms' and the API's shorthands in the one shape: an order left out of `orders` takes
    `answer`; an approval without parts refunds the proposal, scaled down to a lower
    `amount_cents`; one that does not say `on_return` takes the policy's proposal. ValueError
    says what is wrong; `checked` checks the result."""
    open_ = open_orders(review)
    given = _by_number(review, orders)
    if amount_cents is not None:
        if len(open_) != 1:
            raise ValueError(
                "This ticket covers several orders: lower an order's own amount, not the total."
            )
        if answer != "approve" or given:
            raise ValueError("Only an approval of the whole review carries a new amount.")
        given = {next(iter(open_)): {"answer": "approve", "amount_cents": amount_cents}}
    answers: dict[str, dict[str, Any]] = {}
    for number, order in open_.items():
        one = dict(given.get(number) or {"answer": answer})
        if not one.get("reason") and (one.get("answer") == "reject" or len(open_) == 1):
            one["reason"] = reason
        if one.get("answer") == "approve" and one.get("parts") is None:
            one["parts"] = _lowered(number, proposal(order), one.pop("amount_cents", None))
        if one.get("answer") == "approve" and one.get("on_return") is None:
            one["on_return"] = bool(order.get("on_return"))
        answers[number] = one
    return answers


def _by_number(review: Sequence[ReviewOrder], orders: object) -> dict[str, dict[str, Any]]:
    if orders is None:
        return {}
    if not isinstance(orders, Mapping):
        raise ValueError("The answers per order must map each order number to its answer.")
    everyone = {str(o["number"]): o for o in review}
    for number, one in orders.items():
        order = everyone.get(str(number))
        if order is None:
            raise ValueError(
                f"This ticket covers no order {str(number)[:40]}; its orders are "
                f"{', '.join(everyone)}."
            )
        if order.get("status") != "open":
            why = (
                "declined by policy"
                if order.get("status") == "declined"
                else f"refunded already (receipt {order.get('receipt') or 'on file'})"
            )
            raise ValueError(f"Order {number} is {why}; there is nothing to decide for it.")
        if not isinstance(one, Mapping):
            raise ValueError(f"Order {number}: give its answer as approve or reject.")
    return {str(number): dict(one) for number, one in orders.items()}


def _lowered(number: str, parts: list[Part], amount: object) -> list[Part]:
    """The proposal, or its parts scaled down to a lower amount."""
    if not parts:
        raise ValueError(
            f"Nothing is proposed to refund for order {number}: choose what to refund on the "
            "ticket page, or reject it, or ask the customer."
        )
    most = refund_parts.total(parts)
    if amount is None or amount == most:
        return parts
    if isinstance(amount, bool) or not isinstance(amount, int):
        raise ValueError(f"Order {number}: the amount must be in dollars and cents, like 12.50.")
    if not 0 < amount < most:
        raise ValueError(
            f"Order {number}: the new amount must be more than $0.00 and at most the "
            f"{dollars(most)} proposed."
        )
    return policy.scaled(parts, amount)


def checked(review: Sequence[ReviewOrder], given: object) -> dict[str, OrderAnswer]:
    """The one check; ValueError names the order and what is wrong."""
    open_ = open_orders(review)
    if not open_:
        raise ValueError("This review has no open order to answer.")
    if not isinstance(given, Mapping):
        raise ValueError("The answers per order must map each order number to its answer.")
    given = {str(number): one for number, one in given.items()}
    unknown = [n for n in given if n not in open_]
    if unknown:
        raise ValueError(
            f"This review has no open order {unknown[0][:40]}; its open orders are "
            f"{', '.join(open_)}."
        )
    return {
        number: _one_checked(order, number, given.get(number)) for number, order in open_.items()
    }


def _one_checked(order: ReviewOrder, number: str, one: object) -> OrderAnswer:
    if not isinstance(one, Mapping) or one.get("answer") not in ("approve", "reject"):
        raise ValueError(f"Choose approve or reject for order {number}.")
    extra = sorted(set(one) - FIELDS)
    if extra:
        raise ValueError(f"Order {number}: unknown field(s) {', '.join(extra)}.")
    why = one.get("reason") or ""
    if not isinstance(why, str):
        raise ValueError(f"Order {number}: the reason must be text.")
    why = why.strip()
    if len(why) > REASON_MAX:
        raise ValueError(
            f"Order {number}: the reason is too long (at most {REASON_MAX} characters)."
        )
    if one["answer"] == "reject":
        given = [one.get("parts"), one.get("amount_cents")]
        if any(v is not None for v in given) or one.get("on_return") or one.get("offer_credit"):
            raise ValueError(
                f"Order {number}: only an approval carries parts, an amount, a return or an "
                "offer of store credit."
            )
        if not why:
            raise ValueError(
                f"Give a reason for rejecting order {number}; the customer is sent it."
            )
        return {"answer": "reject", "reason": why}
    parts = policy.parts_checked(order["order"], one.get("parts"))
    if one.get("amount_cents") not in (None, refund_parts.total(parts)):
        raise ValueError(f"Order {number}: give the amount in its parts, not beside them.")
    approved: OrderAnswer = {
        "answer": "approve",
        "parts": parts,
        "amount_cents": refund_parts.total(parts),
    }
    if why:
        approved["reason"] = why
    on_return = one.get("on_return") or False
    if not isinstance(on_return, bool):
        raise ValueError(f"Order {number}: on_return is true or false.")
    if on_return and not any(p.get("line") for p in parts):
        raise ValueError(
            f"Order {number}: only items come back; refund the shipping alone without a return."
        )
    if on_return:
        approved["on_return"] = True
    offer = one.get("offer_credit") or False
    if not isinstance(offer, bool):
        raise ValueError(f"Order {number}: offer_credit is true or false.")
    if one.get("credit") and order.get("credit") != "only":
        raise ValueError(f"Order {number}: store credit is the customer's choice: offer it.")
    if order.get("credit") == "only":
        approved["credit"] = True  # the policy pays it as store credit: nothing to offer
    elif offer and order.get("credit") != "offer":
        raise ValueError(f"Order {number}: the shop does not offer store credit.")
    elif offer:
        approved["offer_credit"] = True
    return approved


def edited(review: Sequence[ReviewOrder], answers: Mapping[str, OrderAnswer]) -> bool:
    """Whether an approval refunds other parts than proposed, or without the return the policy
    asks for: only a manager may."""
    open_ = open_orders(review)
    return any(
        one["answer"] == "approve"
        and (
            refund_parts.digest(one["parts"]) != refund_parts.digest(proposal(open_[number]))
            or (bool(open_[number].get("on_return")) and not one.get("on_return"))
        )
        for number, one in answers.items()
    )


def to_come_back(answers: Mapping[str, OrderAnswer]) -> dict[str, list[Part]]:
    """Per order approved on return, the lines to come back (its shipping is refunded with them)."""
    return {
        number: [p for p in one["parts"] if p.get("line")]
        for number, one in answers.items()
        if one["answer"] == "approve" and one.get("on_return")
    }


def approved_cents(answers: Mapping[str, OrderAnswer]) -> int:
    """What an answer pays out, all its approved orders together."""
    return sum(one["amount_cents"] for one in answers.values() if one["answer"] == "approve")
