"""A refund on return: tell the customer what to send back, wait for the goods, then refund
exactly what came back. The wait runs again from the top on resume: no effect before interrupt()."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Literal

from langgraph.runtime import Runtime
from langgraph.types import Command, interrupt

from refunds.flow import answers as flow_answers
from refunds.flow import parts as refund_parts
from refunds.flow.nodes.credit import charges_or_offer
from refunds.flow.nodes.messages import to_customer
from refunds.flow.state import (
    Collaborators,
    OrderAnswer,
    OrderCheck,
    Part,
    RefundState,
    Returning,
    ReturnWait,
    ReviewAnswer,
)
from refunds.flow.words import dollars

NOT_BACK = "The items did not come back."


def return_reference(decision_id: int) -> str:
    """The parcel's reference, from the approval: "RT-1234-56", whose two check digits (ISO 7064
    mod 97, as IBANs) catch a mistyped or misread digit."""
    return f"RT-{decision_id}-{98 - (decision_id * 100) % 97:02d}"


def reference_read(text: str) -> int | None:
    """The approval's id in a reference as scanned or typed, or None when it is not one."""
    said = "".join(text.split()).upper()
    head, _, rest = said.partition("-")
    number, _, _ = rest.partition("-")
    if head != "RT" or not number.isdigit() or len(number) > 12:
        return None
    return int(number) if return_reference(int(number)) == said else None


def return_key(ticket_key: str, decision_id: int) -> str:
    """One return email per approval on return, whatever re-runs."""
    return f"{ticket_key}:return:{decision_id}"


def returning_of(
    state: RefundState, answer: ReviewAnswer, answers: Mapping[str, OrderAnswer]
) -> Returning | None:
    """`approve`'s: the goods an approval waits for, or None when it refunds at once."""
    back = flow_answers.to_come_back(answers)
    if not back:
        return None
    decision_id = int(answer.get("decision_id") or 0)
    return {
        "reference": return_reference(decision_id),
        "decision_id": decision_id,
        "asked_by": answer.get("reviewer") or "a reviewer",
        "orders": back,
    }


def _items(state: RefundState, orders: Mapping[str, list[Part]]) -> list[dict]:
    checks = state.get("checks") or {}
    items = []
    for number, parts in orders.items():
        titles = {line["id"]: line["title"] for line in checks[number]["order"].get("lines") or []}
        items += [
            {"number": number, "quantity": p.get("quantity", 0), "title": titles.get(p["line"], "")}
            for p in parts
        ]
    return items


def ask_return(
    state: RefundState, runtime: Runtime[Collaborators]
) -> Command[Literal["await_return", "approve"]]:
    """Tell the customer once what to send back, where, and the reference to put on it."""
    returning = state["returning"]
    assert returning is not None  # after_review routes here only with goods to come back
    facts = {
        "orders": list(state["order_numbers"]),
        "reference": returning["reference"],
        "address": runtime.context.return_address,
        "items": _items(state, returning["orders"]),
        "days": runtime.context.return_days,
    }
    key = return_key(state["ticket_key"], returning["decision_id"])
    why = to_customer(runtime, state, key, "return", facts)
    if why:
        return Command(
            update={
                "returning": None,
                "review_error": f"The return instructions could not be sent ({why}).",
                "notes": [f"The return instructions could not be sent ({why}): back to review."],
                "trail": ["return_failed"],
            },
            goto="approve",
        )
    to = state["order"]["customer_email"]
    return Command(
        update={
            "notes": [f"Told {to} to send the items back, reference {returning['reference']}."],
            "trail": ["ask_return"],
        },
        goto="await_return",
    )


def return_wait(state: RefundState) -> ReturnWait:
    returning = state["returning"]
    assert returning is not None
    items = ", ".join(f"{i['quantity']} x {i['title']}" for i in _items(state, returning["orders"]))
    return {
        "kind": "return",
        "reference": returning["reference"],
        "return_id": returning["decision_id"],
        "orders": returning["orders"],
        "required_role": state["required_role"],
        "amount_cents": state["amount_cents"],
        "order": state["order"],
        "description": (
            f"**Waiting for the goods** (reference {returning['reference']}): {items}. "
            f"{returning['asked_by']} approved {dollars(state['amount_cents'])} on their return."
        ),
    }


def came_back(returning: Returning, given: object) -> dict[str, list[Part]]:
    """The parts that came back, per order, priced as approved and restocked; ValueError names a
    line never asked back or more units than asked. `given` None: everything came back."""
    if given is None:
        return {
            n: [{**p, "restock": True} for p in parts] for n, parts in returning["orders"].items()
        }
    if not isinstance(given, Mapping):
        raise ValueError("Say what came back per order: its lines and how many of each.")
    unknown = [str(n) for n in given if str(n) not in returning["orders"]]
    if unknown:
        raise ValueError(
            f"Order {unknown[0][:40]} is not in return {returning['reference']}; it covers "
            f"{', '.join(returning['orders'])}."
        )
    back: dict[str, list[Part]] = {}
    for number, parts in returning["orders"].items():
        units = given.get(number) or {}
        if not isinstance(units, Mapping):
            raise ValueError(f"Order {number}: give each line's units that came back.")
        asked: dict[int | None, Part] = {p["line"]: p for p in parts}
        stray = [str(line) for line in units if _int(line) not in asked]
        if stray:
            raise ValueError(
                f"Order {number}: line {stray[0][:20]} was not asked back in return "
                f"{returning['reference']}."
            )
        back[number] = []
        for line, count in units.items():
            part = asked[_int(line)]
            if isinstance(count, bool) or not isinstance(count, int) or count < 0:
                raise ValueError(f"Order {number}: line {line}: units are a whole number.")
            if count > part["quantity"]:
                raise ValueError(
                    f"Order {number}: {count} units of line {line} came back, but "
                    f"{part['quantity']} were asked back."
                )
            if count:
                # Every unit is priced as approved; all of them: exactly the approved amount.
                cents = part["amount_cents"] * count // part["quantity"]
                back[number].append(
                    {**part, "quantity": count, "amount_cents": cents, "restock": True}
                )
    return back


def _int(value: object) -> int | None:
    try:
        return int(str(value))
    except ValueError:
        return None


def await_return(
    state: RefundState, runtime: Runtime[Collaborators]
) -> Command[Literal["approve", "email", "notify", "charge_order", "offer_credit"]]:
    # This node runs again from the top on resume: nothing before interrupt() may have an effect.
    answer: ReviewAnswer = interrupt(return_wait(state))
    returning = state["returning"]
    assert returning is not None
    kind = answer.get("answer")
    ref = returning["reference"]
    if kind == "flagged" or (
        kind == "no_return" and runtime.context.return_default_outcome == "queue"
    ):
        why = (answer.get("reason") or "").strip() or "no reason given"
        if kind == "no_return":
            why = f"nothing came back in {runtime.context.return_days} days"
        said = f"Return {ref}: {why}. A manager decides again."
        return Command(
            update={
                "decision": answer,
                "returning": None,
                "required_role": "manager",
                "review_error": f"The return {ref} was flagged: {why}.",
                "notes": [said],
                "trail": ["return_flagged"],
            },
            goto="approve",
        )
    if kind not in ("received", "no_return"):
        raise ValueError(f"the wait for the goods takes received, flagged or no_return: {answer!r}")
    try:
        back = came_back(returning, answer.get("orders")) if kind == "received" else {}
    except ValueError as exc:  # checked as the desk checked it: never a failed ticket for it
        why = f"The word on the goods of return {ref} could not be applied: {exc}"
        return Command(
            update={
                "decision": answer,
                "returning": None,
                "required_role": "manager",
                "review_error": why,
                "notes": [why],
                "trail": ["return_refused"],
            },
            goto="approve",
        )
    return _refund_what_came(state, answer, returning, back)


def _refund_what_came(
    state: RefundState, answer: ReviewAnswer, returning: Returning, back: dict[str, list[Part]]
) -> Command:
    checks = state.get("checks") or {}
    answers: dict[str, OrderCheck] = {}
    for number in returning["orders"]:
        approved = checks[number]["answer"]
        shipping = [p for p in approved["parts"] if p.get("shipping")]
        if back.get(number):
            parts = back[number] + shipping
            one: OrderAnswer = {
                "answer": "approve",
                "parts": parts,
                "amount_cents": refund_parts.total(parts),
                "returned": True,
            }
            for kept in ("reason", "offer_credit", "credit"):
                if kept in approved:
                    one[kept] = approved[kept]
        else:
            one = {"answer": "reject", "reason": NOT_BACK, "not_back": True}
        answers[number] = {**checks[number], "answer": one}
    merged: RefundState = {**state, "checks": {**checks, **answers}}
    approved_cents = sum(
        c["answer"]["amount_cents"]
        for c in merged["checks"].values()
        if c.get("answer", {}).get("answer") == "approve"
    )
    came = sum(len(parts) for parts in back.values())
    update: RefundState = {
        "decision": answer,
        "returning": None,
        "checks": answers,
        "notes": [
            f"Return {returning['reference']}: "
            + (f"{came} line(s) came back." if came else "nothing came back.")
        ],
        "trail": ["returned" if came else "not_returned"],
    }
    if approved_cents:
        update["amount_cents"] = approved_cents
    else:
        update |= {"outcome": "rejected", "outcome_reason": NOT_BACK}
    return Command(update=update, goto=charges_or_offer(merged))
