"""The review: triage picks who reviews, `approve` pauses on interrupt() with the review request
and checks the answer. Nothing before interrupt() has an effect: the node runs again from the top
on resume."""

from __future__ import annotations

from typing import Literal, cast

from langgraph.runtime import Runtime
from langgraph.types import Command, Send, interrupt

from core.clock import day_words
from refunds import policy
from refunds.flow.nodes.charge import send_charges
from refunds.flow.nodes.common import ordered_checks, reason_of, several
from refunds.flow.state import (
    Collaborators,
    CustomerHistory,
    OrderAnswer,
    RefundState,
    ReviewAnswer,
    ReviewOrder,
    ReviewRequest,
)
from refunds.flow.words import days, dollars


def triage(state: RefundState, runtime: Runtime[Collaborators]) -> Command[Literal["approve"]]:
    amount, flagged = state["amount_cents"], bool(state.get("flags"))
    limit = runtime.context.agent_limit_cents
    reason = reason_of(state)
    role = policy.review_role(amount, flagged=flagged, limit_cents=limit, reason=reason)
    why = policy.why_words(amount, flagged=flagged, limit_cents=limit, reason=reason)
    return Command(
        update={
            "required_role": role,
            "notes": [f"Refund of {dollars(state['amount_cents'])} is {why}: {role} review."],
            "trail": ["triage"],
        },
        goto="approve",
    )


def review_request(state: RefundState) -> ReviewRequest:
    order = state["order"]
    lines = [
        f"**Refund {dollars(state['amount_cents'])}** shipping on order **{order['number']}** "
        f"for {order['customer_name']} ({order['customer_email']}).",
        f"Promised {day_words(order['promised_on'])}, delivered "
        f"{day_words(order['delivered_on'])}: "
        f"{days(state['late_by_days'])} late.",
    ]
    if state.get("payment_error"):
        lines.append(
            f"**The charge was refused:** {state['payment_error']}. No money moved. "
            "Approve to try again, or reject."
        )
    reason = reason_of(state)
    reading = state.get("reading")
    if reason != policy.LATE_DELIVERY or reading:
        line = f"**Reason: {policy.REASONS[reason].lower()}**"
        if reading and reading.get("summary"):
            line += f" (read by {reading.get('read_by') or 'rules'}): {reading['summary']}"
        lines.append(line)
    if state.get("note"):
        lines.append(f"Customer says: {state['note']}")
    return {
        "action_request": {
            "action": "refund",
            "args": {"order": order["number"], "amount_cents": state["amount_cents"]},
        },
        "config": {
            "allow_accept": True,
            "allow_edit": state["required_role"] == "manager",  # a manager may pay less
            "allow_respond": True,
            "allow_ignore": False,
        },
        "description": "\n\n".join(lines),
        "required_role": state["required_role"],
        "amount_cents": state["amount_cents"],
        "order": order,
        "late_by_days": state["late_by_days"],
        "flags": list(state.get("flags", [])),
        "notes": list(state.get("notes", [])),
        "history": state.get("history", CustomerHistory(refunds=0, total_cents=0)),
        "payment_error": state.get("payment_error", ""),
        "reason": reason,
        "reading": reading,
    }


def approve(state: RefundState) -> RefundState:
    if several(state):
        return approve_several(state)
    # This node runs again from the top on resume: nothing before interrupt() may have an effect.
    answer: ReviewAnswer = interrupt(review_request(state))
    if answer.get("answer") not in ("approve", "reject"):
        raise ValueError(f"review answer must be approve or reject, got {answer!r}")
    verb = "Approved" if answer["answer"] == "approve" else "Rejected"
    note = f"{verb} by {answer.get('reviewer', 'a reviewer')}"
    if answer.get("reason"):
        note += f": {answer['reason']}"
    update: RefundState = {"decision": answer, "notes": [note + "."], "trail": ["approve"]}
    edited = answer.get("amount_cents")
    if answer["answer"] == "approve" and edited is not None:
        # An "edit" answer: pay less than asked. Only ever less (the desk checks it, and so does
        # the graph); charge_key includes the amount, so the lower charge has a key of its own.
        if not isinstance(edited, int) or not 0 < edited <= state["amount_cents"]:
            raise ValueError(f"an edited amount must be between 1 and {state['amount_cents']}")
        update["amount_cents"] = edited
        update["notes"] = [
            f"{note}, lowered from {dollars(state['amount_cents'])} to {dollars(edited)}."
        ]
    if answer["answer"] == "reject":
        update |= {"outcome": "rejected", "outcome_reason": answer.get("reason", "")}
    return update


def route_decision(
    state: RefundState,
) -> list[Send] | Literal["charge_card", "notify", "email"]:
    if several(state):
        return send_charges(state)
    return "charge_card" if state["decision"]["answer"] == "approve" else "notify"


def _review_orders(state: RefundState) -> list[ReviewOrder]:
    charges = state.get("charges") or {}
    lines: list[ReviewOrder] = []
    for check in ordered_checks(state):
        charge = charges.get(check["number"], {})
        status: Literal["open", "declined", "refunded"] = "open"
        if not check["refundable"]:
            status = "declined"
        elif charge.get("receipt"):
            status = "refunded"
        lines.append(
            {
                "number": check["number"],
                "amount_cents": check["amount_cents"] if status == "open" else 0,
                "fee_cents": check["order"]["fee_cents"],
                "late_by_days": check["late_by_days"],
                "status": status,
                "declined_reason": check.get("declined_reason", ""),
                "receipt": charge.get("receipt", ""),
                "notes": list(check["notes"]),
                "flags": list(check["flags"]),
            }
        )
    return lines


def several_review_request(state: RefundState) -> ReviewRequest:
    request = review_request(state)
    orders = _review_orders(state)
    open_ = [o for o in orders if o["status"] == "open"]
    first = state["order"]
    lines = [
        f"**Refund {dollars(sum(o['amount_cents'] for o in open_))}** shipping on "
        f"{len(open_)} of {len(orders)} orders for {first['customer_name']} "
        f"({first['customer_email']}): "
        + ", ".join(f"**{o['number']}** {dollars(o['amount_cents'])}" for o in open_)
        + "."
    ]
    for o in orders:
        if o["status"] == "declined":
            lines.append(f"Order {o['number']} is declined by policy: {o['declined_reason']}")
        elif o["status"] == "refunded":
            lines.append(f"Order {o['number']} is refunded already (receipt {o['receipt']}).")
    if state.get("payment_error"):
        lines.append(
            f"**A charge was refused:** {state['payment_error']}. Approve to try again, or reject."
        )
    # The reason and the customer's words, as one order's review says them.
    lines += [
        line
        for line in request["description"].split("\n\n")
        if line.startswith(("**Reason", "Customer says"))
    ]
    numbers = [o["number"] for o in open_]
    request["action_request"] = {
        "action": "refund",
        "args": {"orders": numbers, "amount_cents": sum(o["amount_cents"] for o in open_)},
    }
    request["description"] = "\n\n".join(lines)
    request["amount_cents"] = sum(o["amount_cents"] for o in open_)
    request["orders"] = orders
    return request


def answer_orders(state: RefundState, answer: ReviewAnswer) -> dict[str, OrderAnswer]:
    """The reviewer's answer for each open order: its own entry in `orders`, else the
    answer for all. Refuses an order that is not open or an amount above what it asks."""
    asked = {o["number"]: o["amount_cents"] for o in _review_orders(state) if o["status"] == "open"}
    answers = policy.order_answers_checked(
        asked, answer.get("orders") or {}, answer=answer["answer"], reason=answer.get("reason", "")
    )
    return cast(dict[str, OrderAnswer], answers)


def approve_several(state: RefundState) -> RefundState:
    # This node runs again from the top on resume: nothing before interrupt() may have an effect.
    answer: ReviewAnswer = interrupt(several_review_request(state))
    if answer.get("answer") not in ("approve", "reject"):
        raise ValueError(f"review answer must be approve or reject, got {answer!r}")
    answers = answer_orders(state, answer)
    checks = state.get("checks") or {}
    who = answer.get("reviewer", "a reviewer")
    words = []
    for number, one in answers.items():
        if one["answer"] == "approve":
            asked = checks[number]["amount_cents"]
            lowered = f", lowered from {dollars(asked)}" if one["amount_cents"] < asked else ""
            words.append(f"{number} approved {dollars(one['amount_cents'])}{lowered}")
        else:
            why = f" ({one['reason']})" if one.get("reason") else ""
            words.append(f"{number} rejected{why}")
    approved = [n for n, one in answers.items() if one["answer"] == "approve"]
    paid = [c for c in (state.get("charges") or {}).values() if c.get("receipt")]
    update: RefundState = {
        "decision": answer,
        "checks": {n: {**checks[n], "answer": one} for n, one in answers.items()},
        "amount_cents": sum(answers[n]["amount_cents"] for n in approved)
        + sum(c["amount_cents"] for c in paid),
        "payment_error": "",
        "notes": [f"Reviewed by {who}: " + "; ".join(words) + "."],
        "trail": ["approve"],
    }
    if not approved and not paid:
        reasons = [one.get("reason", "") for one in answers.values() if one.get("reason")]
        update |= {"outcome": "rejected", "outcome_reason": "; ".join(dict.fromkeys(reasons))}
    return update
