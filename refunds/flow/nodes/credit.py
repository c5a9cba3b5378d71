"""Store credit as the customer's choice: an approval that offers it asks them once (a signed
link, or a reply), waits, then pays each offered order as they chose; the wait's end pays money.
The wait runs again from the top on resume: no effect before interrupt()."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Literal

from langgraph.runtime import Runtime
from langgraph.types import Command, Send, interrupt

from refunds.flow.nodes.charge import send_charges
from refunds.flow.nodes.common import ordered_checks
from refunds.flow.nodes.messages import to_customer
from refunds.flow.state import (
    ChoiceWait,
    Collaborators,
    Offering,
    OrderAnswer,
    OrderCheck,
    RefundState,
    ReviewAnswer,
)
from refunds.flow.words import dollars, percent_of


def credit_key(ticket_key: str, decision_id: int) -> str:
    """One offer email per approval that offers store credit, whatever re-runs."""
    return f"{ticket_key}:credit:{decision_id}"


def offering_of(answer: ReviewAnswer, answers: Mapping[str, OrderAnswer]) -> Offering | None:
    """`approve`'s: the orders offered store credit, or None."""
    offered = [n for n, one in answers.items() if one.get("offer_credit")]
    if not offered:
        return None
    return {"decision_id": int(answer.get("decision_id") or 0), "orders": offered}


def _offered(state: RefundState) -> list[OrderCheck]:
    """The offered orders still approved (a return may have brought nothing of one back)."""
    offering = state.get("offering")
    if not offering:
        return []
    return [
        c
        for c in ordered_checks(state)
        if c["number"] in offering["orders"]
        and (c.get("answer") or {}).get("answer") == "approve"
        and (c.get("answer") or {}).get("offer_credit")
    ]


def charges_or_offer(state: RefundState) -> list[Send] | str:
    """Where an approval goes once nothing else waits: the offer first, then the charges."""
    return "offer_credit" if _offered(state) else send_charges(state)


def _sums(state: RefundState) -> tuple[int, int]:
    offered = _offered(state)
    money = sum(c["answer"]["amount_cents"] for c in offered)
    bonus = sum(
        percent_of(c["answer"]["amount_cents"], c.get("credit_bonus_percent", 0)) for c in offered
    )
    return money, money + bonus


def offer_credit(
    state: RefundState, runtime: Runtime[Collaborators]
) -> Command[Literal["await_choice", "charge_order", "email", "notify"]]:
    """Ask the customer once: store credit (with the bonus) or money; undeliverable: money."""
    offering = state["offering"]
    assert offering is not None  # charges_or_offer routes here only with an offer
    money, credit = _sums(state)
    key = credit_key(state["ticket_key"], offering["decision_id"])
    facts = {
        "orders": list(state["order_numbers"]),
        "money_cents": money,
        "credit_cents": credit,
        "bonus_percent": max(c.get("credit_bonus_percent", 0) for c in _offered(state)),
        "days": runtime.context.credit_days,
    }
    why = to_customer(runtime, state, key, "credit_offer", facts)
    if why:
        return _chosen(state, "money", f"The offer of store credit was not delivered ({why}).")
    to = state["order"]["customer_email"]
    return Command(
        update={
            "notes": [f"Offered {to} {dollars(credit)} in store credit or {dollars(money)}."],
            "trail": ["offer_credit"],
        },
        goto="await_choice",
    )


def choice_wait(state: RefundState) -> ChoiceWait:
    offering = state["offering"]
    assert offering is not None
    money, credit = _sums(state)
    return {
        "kind": "choice",
        "offer_id": offering["decision_id"],
        "money_cents": money,
        "credit_cents": credit,
        "required_role": state["required_role"],
        "amount_cents": state["amount_cents"],
        "order": state["order"],
        "description": (
            f"**Waiting on the customer's choice** ({state['order']['customer_email']}): "
            f"{dollars(credit)} in store credit or {dollars(money)} back to their payment."
        ),
    }


def await_choice(state: RefundState) -> Command[Literal["charge_order", "email", "notify"]]:
    # This node runs again from the top on resume: nothing before interrupt() may have an effect.
    answer: ReviewAnswer = interrupt(choice_wait(state))
    choice = answer.get("answer")
    if choice == "credit":
        return _chosen(state, "credit", "The customer chose store credit.", answer)
    if choice == "money":
        why = answer.get("reason") or "The customer chose money."
        return _chosen(state, "money", why, answer)
    raise ValueError(f"the offer of store credit takes credit or money, got {answer!r}")


def _chosen(
    state: RefundState,
    choice: Literal["credit", "money"],
    note: str,
    answer: ReviewAnswer | None = None,
) -> Command:
    """Each offered order paid as chosen; then the charges."""
    checks = state.get("checks") or {}
    paid: dict[str, OrderCheck] = {}
    for check in _offered(state):
        one = OrderAnswer(**check["answer"])
        del one["offer_credit"]
        if choice == "credit":
            one["credit"] = True
        paid[check["number"]] = {**check, "answer": one}
    update: RefundState = {
        "offering": None,
        "checks": paid,
        "notes": [note],
        "trail": [f"chose_{choice}"],
    }
    if answer is not None:
        update["decision"] = answer  # the thread's last answer: a landed resume is noticed
    merged: RefundState = {**state, "checks": {**checks, **paid}, "offering": None}
    return Command(update=update, goto=send_charges(merged))
