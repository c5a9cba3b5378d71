"""The review: triage picks who reviews; `approve` runs again from the top on resume."""

from __future__ import annotations

from typing import Literal

from langgraph.runtime import Runtime
from langgraph.types import Command, interrupt

from core.clock import day_words
from refunds import policy
from refunds.flow import answers as flow_answers
from refunds.flow import parts as refund_parts
from refunds.flow.errors import DISPUTED
from refunds.flow.nodes import asking, credit, returns
from refunds.flow.nodes.common import ordered_checks, reason_of
from refunds.flow.state import (
    TICKET_TELLS,
    Collaborators,
    CustomerHistory,
    OrderAnswer,
    RefundState,
    ReviewAnswer,
    ReviewOrder,
    ReviewRequest,
)
from refunds.flow.words import days, dollars

# After a charge stopped for an open dispute: what a manager's answer does.
AFTER_DISPUTE = (
    "Check the dispute at the payment processor first: approving refunds all the same, "
    "rejecting refunds nothing."
)


def triage(
    state: RefundState, runtime: Runtime[Collaborators]
) -> Command[Literal["received", "approve"]]:
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
        # A ticket the intake opened from the customer's message tells them a person will look.
        goto="received" if (state.get("reading") or {}).get(TICKET_TELLS) else "approve",
    )


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
                # What the order holds and what the policy proposes, for the parts form.
                "order": check["order"],
                "parts": check["parts"] if status == "open" else [],
                "parts_why": check.get("parts_why", ""),
            }
        )
        if status == "open" and charge.get("disputed"):
            lines[-1]["disputed"] = True
        if status == "open" and check.get("on_return"):
            lines[-1]["on_return"] = True
        if status == "open" and "credit" in check:
            lines[-1]["credit"] = check["credit"]
            lines[-1]["credit_bonus_percent"] = check.get("credit_bonus_percent", 0)
    return lines


def _summary(state: RefundState, orders: list[ReviewOrder], asked: int) -> list[str]:
    first = state["order"]
    proposing = [o["parts"] for o in orders if o.get("parts")]
    what = " shipping" if proposing and all(map(refund_parts.only_shipping, proposing)) else ""
    # A proposal of nothing (parts the message does not name) is not "Refund $0.00 shipping".
    asks = f"**Refund {dollars(asked)}**{what}" if asked else "**Nothing is proposed to refund**"
    if len(orders) == 1:
        return [
            f"{asks} on order **{first['number']}** "
            f"for {first['customer_name']} ({first['customer_email']}).",
            f"Promised {day_words(first['promised_on'])}, delivered "
            f"{day_words(first['delivered_on'])}: {days(state['late_by_days'])} late.",
            *_in_the_way(state, orders[0]),
        ]
    open_ = [o for o in orders if o["status"] == "open"]
    lines = [
        f"**Refund {dollars(asked)}**{what} on {len(open_)} of {len(orders)} orders for "
        f"{first['customer_name']} ({first['customer_email']}): "
        + ", ".join(f"**{o['number']}** {dollars(o['amount_cents'])}" for o in open_)
        + "."
    ]
    for o in orders:
        if o["status"] == "declined":
            lines.append(f"Order {o['number']} is declined by policy: {o['declined_reason']}")
        elif o["status"] == "refunded":
            lines.append(f"Order {o['number']} is refunded already (receipt {o['receipt']}).")
    disputed = [o["number"] for o in orders if o.get("disputed")]
    if disputed:
        lines.append(f"**{DISPUTED}** Order {', '.join(disputed)}. {AFTER_DISPUTE}")
    error = state.get("payment_error") or ""
    if error and failed_later(state):
        lines.append(
            f"**A refund failed after it was made:** {error}. No money reached the customer; it "
            "is back in the order's balance. Approve to refund again, or reject."
        )
    elif error and any(DISPUTED not in one for one in error.split("; ")):
        lines.append(
            f"**A charge was refused:** {state['payment_error']}. Approve to try again, or reject."
        )
    return lines


def _in_the_way(state: RefundState, order: ReviewOrder) -> list[str]:
    if order.get("disputed"):
        return [f"**{DISPUTED}** No money moved. {AFTER_DISPUTE}"]
    if state.get("payment_error") and failed_later(state):
        return [
            f"**The refund failed after it was made:** {state['payment_error']}. No money "
            "reached the customer; it is back in the order's balance. Approve to refund "
            "again, or reject."
        ]
    if state.get("payment_error"):
        return [
            f"**The charge was refused:** {state['payment_error']}. No money moved. "
            "Approve to try again, or reject."
        ]
    return []


def failed_later(state: RefundState) -> bool:
    """A refund failed after it was made, not a charge refused: the later in the trail says."""
    for step in reversed(state.get("trail") or []):
        if step in ("refund_failed", "payment_failed"):
            return step == "refund_failed"
    return False


def review_request(state: RefundState) -> ReviewRequest:
    orders = _review_orders(state)
    open_ = [o for o in orders if o["status"] == "open"]
    asked = sum(o["amount_cents"] for o in open_)
    lines = _summary(state, orders, asked)
    if state.get("review_error"):
        lines.insert(1, f"**{state['review_error']}** Answer it again.")
    reason = reason_of(state)
    reading = state.get("reading")
    if reason != policy.LATE_DELIVERY or reading:
        line = f"**Reason: {policy.REASONS[reason].lower()}**"
        if reading and reading.get("summary"):
            line += f" (read by {reading.get('read_by') or 'rules'}): {reading['summary']}"
        lines.append(line)
    if state.get("note"):
        lines.append(f"Customer says: {state['note']}")
    replies = list(state.get("replies") or [])
    for one in replies:
        lines.append(f"{one['asked_by']} asked: {one['question']}")
        if one.get("no_reply"):
            lines.append("**The customer did not reply.**")
            continue
        lines.append(f"**The customer replied:** “{one['reply'] or '(no text)'}”")
    request: ReviewRequest = {
        "action_request": {
            "action": "refund",
            "args": {"orders": [o["number"] for o in open_], "amount_cents": asked},
        },
        "config": {
            "allow_accept": True,
            "allow_edit": state["required_role"] == "manager",  # a manager may pay less
            "allow_respond": True,
            "allow_ignore": False,
        },
        "description": "\n\n".join(lines),
        "required_role": state["required_role"],
        "amount_cents": asked,
        "order": state["order"],
        "late_by_days": state["late_by_days"],
        "flags": list(state.get("flags", [])),
        "notes": list(state.get("notes", [])),
        "history": state.get("history", CustomerHistory(refunds=0, total_cents=0)),
        "payment_error": state.get("payment_error", ""),
        "reason": reason,
        "reading": reading,
        "orders": orders,
    }
    if replies:
        request["replies"] = replies
    disputed = [o["number"] for o in orders if o.get("disputed")]
    if disputed:
        request["disputed"] = disputed
    if state.get("payment_error") and failed_later(state):
        request["refund_failed"] = True
    return request


def answer_orders(state: RefundState, answer: ReviewAnswer) -> dict[str, OrderAnswer]:
    """Checked again as the decision service checked it; ValueError when the review changed."""
    orders = _review_orders(state)
    answers = flow_answers.checked(orders, answer.get("orders"))
    # What this review said of a dispute is what its approval answers: the manager saw it.
    disputed = {o["number"] for o in orders if o.get("disputed")}
    for number, one in answers.items():
        if one["answer"] == "approve" and number in disputed:
            one["dispute_seen"] = True
    return answers


def _review_note(state: RefundState, answer: ReviewAnswer, answers: dict[str, OrderAnswer]) -> str:
    who = answer.get("reviewer", "a reviewer")
    checks = state.get("checks") or {}
    if len(ordered_checks(state)) == 1:
        ((number, one),) = answers.items()
        if one["answer"] == "reject":
            why = f": {one['reason']}" if one.get("reason") else ""
            return f"Rejected by {who}{why}."
        asked = checks[number]["amount_cents"]
        if one["amount_cents"] < asked:
            return (
                f"Approved by {who}, lowered from {dollars(asked)} to "
                f"{dollars(one['amount_cents'])}."
            )
        return f"Approved by {who}."
    words = []
    for number, one in answers.items():
        if one["answer"] == "approve":
            asked = checks[number]["amount_cents"]
            lowered = f", lowered from {dollars(asked)}" if one["amount_cents"] < asked else ""
            words.append(f"{number} approved {dollars(one['amount_cents'])}{lowered}")
        else:
            why = f" ({one['reason']})" if one.get("reason") else ""
            words.append(f"{number} rejected{why}")
    return f"Reviewed by {who}: " + "; ".join(words) + "."


def approve(state: RefundState) -> RefundState:
    # This node runs again from the top on resume: nothing before interrupt() may have an effect.
    answer: ReviewAnswer = interrupt(review_request(state))
    if answer.get("answer") == "ask":  # flow version 7: the customer is asked, nothing decided
        return asking.asked(state, answer)
    if answer.get("answer") not in ("approve", "reject"):
        raise ValueError(f"review answer must be approve or reject (or ask), got {answer!r}")
    try:
        answers = answer_orders(state, answer)
    except ValueError as exc:
        # Never a failed ticket for what a person decided: the review comes back, saying why.
        why = (
            f"The decision of {answer.get('reviewer') or 'a reviewer'} could not be applied: {exc}"
        )
        return {"review_error": why, "notes": [why], "trail": ["decision_refused"]}
    checks = state.get("checks") or {}
    approved = [n for n, one in answers.items() if one["answer"] == "approve"]
    paid = [c for c in (state.get("charges") or {}).values() if c.get("receipt")]
    update: RefundState = {
        "decision": answer,
        "checks": {n: {**checks[n], "answer": one} for n, one in answers.items()},
        "payment_error": "",
        "review_error": "",
        "returning": returns.returning_of(state, answer, answers),
        "offering": credit.offering_of(answer, answers),
        "notes": [_review_note(state, answer, answers)],
        "trail": ["approve"],
    }
    if approved or paid:  # what is paid out; a rejection keeps the amount it was asked
        update["amount_cents"] = sum(answers[n]["amount_cents"] for n in approved) + sum(
            c["amount_cents"] for c in paid
        )
    else:
        reasons = [one.get("reason", "") for one in answers.values() if one.get("reason")]
        update |= {"outcome": "rejected", "outcome_reason": "; ".join(dict.fromkeys(reasons))}
    return update
