"""Node functions. Each returns only the keys it changes; collaborators come from the runtime
context. No Django imports: the graph runs against fakes in memory for tests."""

from __future__ import annotations

from datetime import date, timedelta
from typing import Literal

from langgraph.runtime import Runtime
from langgraph.types import Command, RetryPolicy, interrupt

from core.clock import day_words
from refunds import policy
from refunds.flow.errors import (
    ChargeRefused,
    MailRefused,
    MailRetryable,
    OrderNotFound,
    RetryableGatewayError,
)
from refunds.flow.state import (
    Collaborators,
    CustomerHistory,
    RefundState,
    ReviewAnswer,
    ReviewRequest,
)
from refunds.flow.words import days, dollars

HISTORY_FLAG_AT = 3  # this many earlier refunds sends the next one to a manager
RECENT_DAYS = 30
RECENT_FLAG_AT = 2  # two refunds in the last 30 days: the third goes to a manager
FEE_FLAG_CENTS = 10_000  # a shipping fee above $100 is unusual enough for a second look

# Transient gateway errors are retried with the same key (harmless: the gateway answers a repeated
# key with the first result); when the retries run out a manager hears that no money moved.
CHARGE_RETRY = RetryPolicy(
    max_attempts=3, initial_interval=0.2, max_interval=2.0, retry_on=RetryableGatewayError
)
# A mail server that refuses for a while is tried again with backoff; when the retries run out the
# refund stands and the email shows as not delivered, with a Resend for admins.
MAIL_RETRY = RetryPolicy(
    max_attempts=4,
    initial_interval=1.0,
    backoff_factor=2.0,
    max_interval=8.0,
    retry_on=MailRetryable,
)


def customer_namespace(email: str) -> tuple[str, ...]:
    # Store namespace labels may not contain periods.
    return ("customers", email.lower().replace(".", "%2E"))


def _attempt(runtime: Runtime[Collaborators]) -> int:
    info = runtime.execution_info
    return info.node_attempt if info is not None else 1


def lookup(state: RefundState, runtime: Runtime[Collaborators]) -> RefundState:
    order = runtime.context.find_order(state["order_number"])
    if order is None:
        raise OrderNotFound(f"order {state['order_number']} does not exist")
    balance = max(order["fee_cents"] - order.get("refunded_cents", 0), 0)
    notes = [f"Order {order['number']} for {order['customer_name']}."]
    if order.get("refunded_cents"):
        notes.append(
            f"{dollars(order['refunded_cents'])} of the {dollars(order['fee_cents'])} fee was "
            f"already refunded (ticket {order['refunded_by_ticket']}); "
            f"{dollars(balance)} remains."
        )
    return {
        "order": order,
        "balance_cents": balance,
        "amount_cents": balance,
        "notes": notes,
        "trail": ["lookup"],
    }


def fraud_check(state: RefundState) -> RefundState:
    flags = []
    if state["order"]["fee_cents"] > FEE_FLAG_CENTS:
        flags.append(f"Shipping fee {dollars(state['order']['fee_cents'])} is unusually high.")
    return {"flags": flags, "trail": ["fraud_check"]}


def history_check(state: RefundState, runtime: Runtime[Collaborators]) -> RefundState:
    """Reads what the desk knows about this customer from the cross-thread store."""
    refunds = []
    if runtime.store is not None:
        items = runtime.store.search(
            customer_namespace(state["order"]["customer_email"]), limit=1000
        )
        refunds = [i.value for i in items if i.key != state["ticket_key"]]
    since = (runtime.context.today() - timedelta(days=RECENT_DAYS)).isoformat()
    recent = [r for r in refunds if r.get("refunded_on", "") >= since]
    history: CustomerHistory = {
        "refunds": len(refunds),
        "total_cents": sum(r["amount_cents"] for r in refunds),
        "recent": len(recent),
    }
    flags = []
    if len(recent) >= RECENT_FLAG_AT:
        flags.append(
            f"This would be the customer's refund number {len(recent) + 1} within "
            f"{RECENT_DAYS} days ({dollars(sum(r['amount_cents'] for r in recent))} so far)."
        )
    elif history["refunds"] >= HISTORY_FLAG_AT:
        flags.append(f"Customer already had {history['refunds']} refunds.")
    return {"history": history, "flags": flags, "trail": ["history_check"]}


def _reason(state: RefundState) -> str:
    # A state without one was opened by order number for a late delivery (flow version 2 and
    # before; refunds/flow/versions.py carries paused ones across).
    return state.get("reason") or policy.LATE_DELIVERY


def check_policy(state: RefundState) -> RefundState:
    order = state["order"]
    late = (
        date.fromisoformat(order["delivered_on"]) - date.fromisoformat(order["promised_on"])
    ).days
    if not policy.routes_by_lateness(_reason(state)):
        note = policy.reason_sentence(_reason(state))
        if state["balance_cents"] <= 0:
            note = "The fee was already refunded in full."
    elif late <= 0:
        note = "Delivered on time: shipping is not refundable."
    elif state["balance_cents"] <= 0:
        note = f"Delivered {days(late)} late, but the fee was already refunded in full."
    else:
        note = f"Delivered {days(late)} late: shipping is refundable."
    return {"late_by_days": late, "notes": [note], "trail": ["check_policy"]}


def route_policy(state: RefundState) -> Literal["decline", "triage"]:
    # Lateness decides a late delivery only; the other reasons go to a manager while anything
    # is left to refund.
    late = state["late_by_days"] > 0 or not policy.routes_by_lateness(_reason(state))
    return "triage" if late and state["balance_cents"] > 0 else "decline"


def decline(state: RefundState) -> RefundState:
    order = state["order"]
    if state["late_by_days"] > 0 or not policy.routes_by_lateness(_reason(state)):
        # Nothing left to refund.
        reason = (
            f"The shipping fee of order {order['number']} was already refunded in full "
            f"({dollars(order['refunded_cents'])}, ticket {order['refunded_by_ticket']})."
        )
    else:
        early = -state["late_by_days"]
        when = "on time" if early == 0 else f"{days(early)} early"
        reason = f"Your order arrived {when}, so the shipping fee isn't refundable."
    return {"outcome": "declined", "outcome_reason": reason, "trail": ["decline"]}


def triage(state: RefundState, runtime: Runtime[Collaborators]) -> Command[Literal["approve"]]:
    amount, flagged = state["amount_cents"], bool(state.get("flags"))
    limit = runtime.context.agent_limit_cents
    reason = _reason(state)
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
    reason = _reason(state)
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


def route_decision(state: RefundState) -> Literal["charge_card", "notify"]:
    return "charge_card" if state["decision"]["answer"] == "approve" else "notify"


def charge_key(ticket_key: str, amount_cents: int) -> str:
    # Derived from the thread, the step and the amount owed, never random: a re-run returns the
    # first charge, and a corrected amount (a fork) gets a key of its own, never an old one.
    return f"{ticket_key}:charge_card:{amount_cents}"


def charge_card(
    state: RefundState, runtime: Runtime[Collaborators]
) -> Command[Literal["email", "approve"]]:
    """Move the money once. Only a definite "no" (a decline, the order's balance, the gateway down
    through every retry with nothing charged) goes back to a manager; anything whose outcome is
    not known propagates, stops the run, and is resolved by looking the key up on the next."""
    amount = state["amount_cents"]
    try:
        receipt = runtime.context.pay(
            key=charge_key(state["ticket_key"], amount), amount_cents=amount
        )
    except ChargeRefused as exc:
        return _back_to_a_manager(str(exc))
    except RetryableGatewayError as exc:
        if _attempt(runtime) < CHARGE_RETRY.max_attempts:
            raise  # the RetryPolicy runs the node again
        return _back_to_a_manager(f"the gateway stayed unavailable ({exc})")
    return Command(
        update={
            "receipt": receipt,
            "payment_error": "",
            "notes": [f"Charged {dollars(amount)}, receipt {receipt}."],
            "trail": ["charge_card"],
        },
        goto="email",
    )


def _back_to_a_manager(why: str) -> Command[Literal["email", "approve"]]:
    # Typed as charge_card's own answer (Command is invariant in its destinations); it only
    # ever goes to approve.
    return Command(
        update={
            "payment_error": why,
            "required_role": "manager",
            "notes": [f"Charge refused: {why}. No money moved."],
            "trail": ["payment_failed"],
        },
        goto="approve",
    )


def _deliver(runtime: Runtime[Collaborators], **message: str) -> str:
    """Send through the outbox; return "" when delivered, else why not (after the retries)."""
    try:
        runtime.context.send_mail(**message)
    except MailRefused as exc:
        return str(exc)
    except MailRetryable as exc:
        if _attempt(runtime) < MAIL_RETRY.max_attempts:
            raise  # the RetryPolicy runs the node again, with backoff
        return str(exc)
    return ""


def email_key(ticket_key: str) -> str:
    return f"{ticket_key}:email"  # the refund's confirmation: a ticket is refunded once


def notify_key(state: RefundState) -> str:
    # A fork (an admin's correction) may turn a rejection into a second review: each fork's
    # outcome is its own message, a re-run of the same fork's notify is not.
    forks = state.get("forks", 0)
    return f"{state['ticket_key']}:notify" + (f":fork{forks}" if forks else "")


def notify(state: RefundState, runtime: Runtime[Collaborators]) -> RefundState:
    """Tell the customer why there is no refund (declined by policy or rejected by a reviewer)."""
    order = state["order"]
    error = _deliver(
        runtime,
        key=notify_key(state),
        to=order["customer_email"],
        subject=f"About your refund request for order {order['number']}",
        body=(
            f"Hello {order['customer_name']},\n\n"
            f"We looked at your request about order {order['number']} and cannot refund "
            f"the shipping fee. {state['outcome_reason']}\n\n"
            "Reply to this message if something is not right.\n\nRefund Desk"
        ),
    )
    note = f"Told {order['customer_email']} why." if not error else f"Email not delivered: {error}."
    return {"email_delivered": not error, "notes": [note], "trail": ["notify"]}


def _why_refunded(state: RefundState) -> str:
    reason = _reason(state)
    if reason == policy.LATE_DELIVERY:
        return f"which arrived {days(state['late_by_days'])} late"
    return f"about your report ({policy.REASONS[reason].lower()})"


def email(state: RefundState, runtime: Runtime[Collaborators]) -> RefundState:
    """Confirm the refund. Paid means refunded: a mail server that never accepts leaves the
    refund standing, with the email shown as not delivered."""
    order = state["order"]
    amount = state["amount_cents"]
    error = _deliver(
        runtime,
        key=email_key(state["ticket_key"]),
        to=order["customer_email"],
        subject=f"Your refund for order {order['number']}",
        body=(
            f"Hello {order['customer_name']},\n\n"
            f"We refunded {dollars(amount)} in shipping for order {order['number']}, "
            f"{_why_refunded(state)}. Receipt: {state['receipt']}.\n\n"
            "Refund Desk"
        ),
    )
    if runtime.store is not None:
        # Keyed by the ticket, so a re-run writes the same record again, not a second one.
        runtime.store.put(
            customer_namespace(order["customer_email"]),
            state["ticket_key"],
            {
                "amount_cents": amount,
                "order": order["number"],
                "refunded_on": runtime.context.today().isoformat(),
            },
        )
    note = (
        f"Confirmation sent to {order['customer_email']}."
        if not error
        else f"Confirmation email not delivered: {error}."
    )
    return {
        "outcome": "refunded",
        "outcome_reason": f"Refunded {dollars(amount)}.",
        "email_delivered": not error,
        "notes": [note],
        "trail": ["email"],
    }
