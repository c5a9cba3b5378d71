"""Node functions. Each returns only the keys it changes; collaborators come from the runtime
context. No Django imports: the graph runs against fakes in memory for tests."""

from __future__ import annotations

from datetime import date
from typing import Literal

from langgraph.errors import GraphBubbleUp, NodeError
from langgraph.runtime import Runtime
from langgraph.types import Command, interrupt

from refunds.state import (
    AGENT_LIMIT_CENTS,
    Collaborators,
    LeaseLost,
    OrderNotFound,
    RefundState,
    ReviewAnswer,
    ReviewRequest,
)

HISTORY_FLAG_AT = 3  # this many earlier refunds sends the next one to a manager
FEE_FLAG_CENTS = 10_000  # a shipping fee above $100 is unusual enough for a second look


def money(cents: int) -> str:
    return f"${cents / 100:,.2f}"


def days(n: int) -> str:
    return f"{n} day{'' if n == 1 else 's'}"


def customer_namespace(email: str) -> tuple[str, ...]:
    # Store namespace labels may not contain periods.
    return ("customers", email.lower().replace(".", "%2E"))


def lookup(state: RefundState, runtime: Runtime[Collaborators]) -> RefundState:
    ctx = runtime.context
    ctx.crash_point(state["ticket_key"], "lookup")
    order = ctx.find_order(state["order_number"])
    if order is None:
        raise OrderNotFound(f"order {state['order_number']} does not exist")
    return {
        "order": order,
        "amount_cents": order["fee_cents"],
        "notes": [f"Order {order['number']} for {order['customer_name']}."],
        "trail": ["lookup"],
    }


def fraud_check(state: RefundState, runtime: Runtime[Collaborators]) -> RefundState:
    runtime.context.crash_point(state["ticket_key"], "fraud_check")
    flags = []
    if state["order"]["fee_cents"] > FEE_FLAG_CENTS:
        flags.append(f"Shipping fee {money(state['order']['fee_cents'])} is unusually high.")
    return {"flags": flags, "trail": ["fraud_check"]}


def history_check(state: RefundState, runtime: Runtime[Collaborators]) -> RefundState:
    """Reads what the desk knows about this customer from the cross-thread store."""
    runtime.context.crash_point(state["ticket_key"], "history_check")
    refunds = []
    if runtime.store is not None:
        items = runtime.store.search(customer_namespace(state["order"]["customer_email"]))
        refunds = [i.value for i in items if i.key != state["ticket_key"]]
    history = {"refunds": len(refunds), "total_cents": sum(r["amount_cents"] for r in refunds)}
    flags = []
    if history["refunds"] >= HISTORY_FLAG_AT:
        flags.append(f"Customer already had {history['refunds']} refunds.")
    return {"history": history, "flags": flags, "trail": ["history_check"]}


def check_policy(state: RefundState, runtime: Runtime[Collaborators]) -> RefundState:
    runtime.context.crash_point(state["ticket_key"], "check_policy")
    order = state["order"]
    late = (
        date.fromisoformat(order["delivered_on"]) - date.fromisoformat(order["promised_on"])
    ).days
    if late > 0:
        note = f"Delivered {days(late)} late: shipping is refundable."
    else:
        note = "Delivered on time: shipping is not refundable."
    return {"late_by_days": late, "notes": [note], "trail": ["check_policy"]}


def route_policy(state: RefundState) -> Literal["decline", "triage"]:
    return "triage" if state["late_by_days"] > 0 else "decline"


def decline(state: RefundState) -> RefundState:
    early = -state["late_by_days"]
    when = "on time" if early == 0 else f"{days(early)} early"
    reason = f"Your order arrived {when}, so the shipping fee isn't refundable."
    return {"outcome": "declined", "outcome_reason": reason, "trail": ["decline"]}


def triage(state: RefundState) -> Command[Literal["approve"]]:
    over = state["amount_cents"] > AGENT_LIMIT_CENTS
    role = "manager" if over or state.get("flags") else "agent"
    why = (
        "over $20.00" if over else ("flagged by policy" if role == "manager" else "$20.00 or less")
    )
    return Command(
        update={
            "required_role": role,
            "notes": [f"Refund of {money(state['amount_cents'])} is {why}: {role} review."],
            "trail": ["triage"],
        },
        goto="approve",
    )


def review_request(state: RefundState) -> ReviewRequest:
    order = state["order"]
    lines = [
        f"**Refund {money(state['amount_cents'])}** shipping on order **{order['number']}** "
        f"for {order['customer_name']} ({order['customer_email']}).",
        f"Promised {order['promised_on']}, delivered {order['delivered_on']}: "
        f"{days(state['late_by_days'])} late.",
    ]
    if state.get("payment_error"):
        lines.append(f"**The charge failed:** {state['payment_error']}. Approve to try again.")
    if state.get("note"):
        lines.append(f"Customer says: {state['note']}")
    return {
        "action_request": {
            "action": "refund",
            "args": {"order": order["number"], "amount_cents": state["amount_cents"]},
        },
        "config": {
            "allow_accept": True,
            "allow_edit": False,
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
        "history": state.get("history", {"refunds": 0, "total_cents": 0}),
        "payment_error": state.get("payment_error", ""),
    }


def approve(state: RefundState) -> RefundState:
    # This node runs again from the top on resume: nothing before interrupt() may have an effect.
    answer: ReviewAnswer = interrupt(review_request(state))
    if answer.get("answer") not in ("approve", "reject"):
        raise ValueError(f"review answer must be approve or reject, got {answer!r}")
    verb = "Approved" if answer["answer"] == "approve" else "Rejected"
    note = f"{verb} by {answer.get('reviewer', 'a reviewer')}"
    if answer.get("reason"):
        note += f": {answer['reason']}"
    update: RefundState = {"decision": answer, "notes": [note + "."], "trail": ["approve"]}
    if answer["answer"] == "reject":
        update |= {"outcome": "rejected", "outcome_reason": answer.get("reason", "")}
    return update


def route_decision(state: RefundState) -> Literal["charge_card", "notify"]:
    return "charge_card" if state["decision"]["answer"] == "approve" else "notify"


class _LeaseLostBeforeCharge(LeaseLost, GraphBubbleUp):
    """LeaseLost that LangGraph lets through: a GraphBubbleUp skips charge_card's error handler
    and writes nothing to the thread, so the worker that now holds the lease finds charge_card
    still to run, instead of a manager finding a failed charge that never was."""


def charge_key(ticket_key: str) -> str:
    # Derived from the thread and the step, never random: a re-run returns the first charge.
    return f"{ticket_key}:charge_card"


def charge_card(state: RefundState, runtime: Runtime[Collaborators]) -> RefundState:
    ctx = runtime.context
    key = state["ticket_key"]
    ctx.crash_point(key, "charge_card:before_gateway")
    if not ctx.still_owner():
        raise _LeaseLostBeforeCharge(f"lease on {key} lost before the charge")
    receipt = ctx.gateway.charge(
        idempotency_key=charge_key(key), amount_cents=state["amount_cents"], ticket_key=key
    )
    ctx.crash_point(key, "charge_card:after_gateway")
    return {
        "receipt": receipt,
        "payment_error": "",
        "notes": [f"Charged {money(state['amount_cents'])}, receipt {receipt}."],
        "trail": ["charge_card"],
    }


def payment_failed(state: RefundState, error: NodeError) -> Command[Literal["approve"]]:
    """Retries are used up (or the error is permanent): a manager decides what happens next."""
    return Command(
        update={
            "payment_error": str(error.error),
            "required_role": "manager",
            "notes": [f"Charge failed: {error.error}."],
            "trail": ["payment_failed"],
        },
        goto="approve",
    )


def email_key(ticket_key: str) -> str:
    return f"{ticket_key}:email"  # the refund's confirmation: a ticket is refunded once


def notify_key(state: RefundState) -> str:
    # A fork (an admin's correction) may turn a rejection into a second review: each fork's
    # outcome is its own message, a re-run of the same fork's notify is not.
    forks = state.get("forks", 0)
    return f"{state['ticket_key']}:notify" + (f":fork{forks}" if forks else "")


def notify(state: RefundState, runtime: Runtime[Collaborators]) -> RefundState:
    """Tell the customer why there is no refund (declined by policy or rejected by a reviewer)."""
    ctx = runtime.context
    key = state["ticket_key"]
    order = state["order"]
    ctx.crash_point(key, "notify:before_send")
    ctx.mailer(
        key=notify_key(state),
        ticket_key=key,
        to=order["customer_email"],
        subject=f"About your refund request for order {order['number']}",
        body=(
            f"Hello {order['customer_name']},\n\n"
            f"We looked at your request about order {order['number']} and cannot refund "
            f"the shipping fee. {state['outcome_reason']}\n\n"
            "Reply to this message if something is not right.\n\nRefund Desk"
        ),
    )
    return {"notes": [f"Told {order['customer_email']} why."], "trail": ["notify"]}


def email(state: RefundState, runtime: Runtime[Collaborators]) -> RefundState:
    ctx = runtime.context
    key = state["ticket_key"]
    order = state["order"]
    ctx.crash_point(key, "email:before_send")
    ctx.mailer(
        key=email_key(key),
        ticket_key=key,
        to=order["customer_email"],
        subject=f"Your refund for order {order['number']}",
        body=(
            f"Hello {order['customer_name']},\n\n"
            f"We refunded {money(state['amount_cents'])} in shipping for order {order['number']}, "
            f"which arrived {days(state['late_by_days'])} late. Receipt: {state['receipt']}.\n\n"
            "Refund Desk"
        ),
    )
    if runtime.store is not None:
        # Keyed by the ticket, so a re-run writes the same record again, not a second one.
        runtime.store.put(
            customer_namespace(order["customer_email"]),
            key,
            {"amount_cents": state["amount_cents"], "order": order["number"]},
        )
    ctx.crash_point(key, "email:after_send")
    return {
        "outcome": "refunded",
        "outcome_reason": f"Refunded {money(state['amount_cents'])}.",
        "notes": [f"Confirmation sent to {order['customer_email']}."],
        "trail": ["email"],
    }
