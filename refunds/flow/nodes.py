"""Node functions. Each returns only the keys it changes; collaborators come from the runtime
context. No Django imports: the graph runs against fakes in memory for tests."""

from __future__ import annotations

import time
from collections.abc import Callable
from datetime import date, timedelta
from typing import Any, Literal, cast

from langgraph.errors import GraphDrained
from langgraph.runtime import Runtime
from langgraph.types import Command, RetryPolicy, Send, interrupt

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
    ChargeTask,
    CheckTask,
    Collaborators,
    CustomerHistory,
    OrderAnswer,
    OrderCharge,
    OrderCheck,
    RefundState,
    ReviewAnswer,
    ReviewOrder,
    ReviewRequest,
)
from refunds.flow.words import days, dollars

HISTORY_FLAG_AT = 3  # this many earlier refunds sends the next one to a manager
RECENT_DAYS = 30
RECENT_FLAG_AT = 2  # two refunds in the last 30 days: the third goes to a manager
FEE_FLAG_CENTS = 10_000  # a shipping fee above $100 is unusual enough for a second look

# A gateway that is down (nothing charged) is tried again with the same key, harmless since the
# gateway answers a repeated key with the first result, backing off, for the context's
# `charge_retry_seconds`: an outage of a few seconds is ridden out under the run's lease, and a
# manager hears that no money moved only after that. The attempts only bound a budget of minutes.
CHARGE_RETRY = RetryPolicy(
    max_attempts=100,
    initial_interval=0.5,
    backoff_factor=2.0,
    max_interval=5.0,
    retry_on=RetryableGatewayError,
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


def _stop_if_drained(runtime: Runtime[Collaborators]) -> None:
    """A run asked to stop (its lease lost, the worker's time up) makes no further gateway call
    and sends nobody to a manager: the next run of the thread starts the retries afresh. Checked
    before every attempt, since LangGraph's retries do not look at the drain."""
    if runtime.drain_requested:
        raise GraphDrained(runtime.drain_reason or "drain requested")


def _retry_charge(runtime: Runtime[Collaborators]) -> bool:
    """After a retryable gateway error: True while the RetryPolicy should run the charge again."""
    _stop_if_drained(runtime)
    info = runtime.execution_info
    started = info.node_first_attempt_time if info is not None else None
    spent = time.time() - started if started is not None else 0.0
    return (
        _attempt(runtime) < CHARGE_RETRY.max_attempts
        and spent < runtime.context.charge_retry_seconds
    )


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
        own = state["ticket_key"]
        refunds = [i.value for i in items if i.key != own and not i.key.startswith(own + ":")]
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
    if several(state):
        reasons = " ".join(f"Order {c['number']}: {c['declined_reason']}" for c in _checks(state))
        return {"outcome": "declined", "outcome_reason": reasons, "trail": ["decline"]}
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
    _stop_if_drained(runtime)
    try:
        receipt = runtime.context.pay(
            key=charge_key(state["ticket_key"], amount), amount_cents=amount
        )
    except ChargeRefused as exc:
        return _back_to_a_manager(str(exc))
    except RetryableGatewayError as exc:
        if _retry_charge(runtime):
            raise  # the RetryPolicy runs the node again, after its back-off
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
    if several(state):
        subject = f"About your refund request for orders {', '.join(state['order_numbers'])}"
        body = several_email_body(state, refunded_words=False)
    else:
        subject = f"About your refund request for order {order['number']}"
        body = (
            f"Hello {order['customer_name']},\n\n"
            f"We looked at your request about order {order['number']} and cannot refund "
            f"the shipping fee. {state['outcome_reason']}\n\n"
            "Reply to this message if something is not right.\n\nRefund Desk"
        )
    error = _deliver(
        runtime, key=notify_key(state), to=order["customer_email"], subject=subject, body=body
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
    if several(state):
        subject = f"Your refund for orders {', '.join(state['order_numbers'])}"
        body = several_email_body(state, refunded_words=True)
        paid = {
            f"{state['ticket_key']}:{c['number']}": (c["number"], c["amount_cents"])
            for c in (state.get("charges") or {}).values()
            if c.get("receipt")
        }
    else:
        subject = f"Your refund for order {order['number']}"
        body = (
            f"Hello {order['customer_name']},\n\n"
            f"We refunded {dollars(amount)} in shipping for order {order['number']}, "
            f"{_why_refunded(state)}. Receipt: {state['receipt']}.\n\n"
            "Refund Desk"
        )
        paid = {state["ticket_key"]: (order["number"], amount)}
    error = _deliver(
        runtime,
        key=email_key(state["ticket_key"]),
        to=order["customer_email"],
        subject=subject,
        body=body,
    )
    if runtime.store is not None:
        # Keyed by the ticket (and the order, for several), so a re-run writes the same records
        # again, not second ones.
        for key, (number, cents) in paid.items():
            runtime.store.put(
                customer_namespace(order["customer_email"]),
                key,
                {
                    "amount_cents": cents,
                    "order": number,
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


# --- a ticket of several orders ----------------------------------------------------------------
# One order runs the nodes above as they are. Several fan out: `fan_out` sends one check_order
# per order (the same lookup, fraud, history and policy as above, on that order alone), `gather`
# sums them up for triage, the one review answers per order, `send_charges` sends one
# charge_order per approved order, and `settle_charges` sends the refused ones back to a
# manager or goes on to the one email that lists every order.


def several(state: RefundState) -> bool:
    return len(state.get("order_numbers") or []) > 1


def fan_out(state: RefundState) -> list[Send] | Literal["lookup"]:
    if not several(state):
        return "lookup"
    return [
        Send(
            "check_order",
            CheckTask(ticket_key=state["ticket_key"], order_number=number, reason=_reason(state)),
        )
        for number in state["order_numbers"]
    ]


def check_order(task: CheckTask, runtime: Runtime[Collaborators]) -> RefundState:
    """lookup, fraud_check, history_check and check_policy for one order, in one task: pure
    reads, so a task that dies is simply run again."""
    local: RefundState = {
        "ticket_key": task["ticket_key"],
        "order_number": task["order_number"],
        "reason": task["reason"],
    }
    steps: list[Callable[[RefundState], RefundState]] = [
        lambda s: lookup(s, runtime),
        fraud_check,
        lambda s: history_check(s, runtime),
        check_policy,
    ]
    for step in steps:
        _fold(local, step(local))
    refundable = route_policy(local) == "triage"
    number = local["order"]["number"]
    check: OrderCheck = {
        "number": number,
        "order": local["order"],
        "balance_cents": local["balance_cents"],
        "amount_cents": local["balance_cents"] if refundable else 0,
        "late_by_days": local["late_by_days"],
        "refundable": refundable,
        "declined_reason": "" if refundable else decline(local)["outcome_reason"],
        "flags": local.get("flags", []),
        "notes": local.get("notes", []),
        "history": local["history"],
    }
    return {"checks": {number: check}, "trail": [f"check_order:{number}"]}


def _fold(local: RefundState, update: RefundState) -> None:
    """Apply a node's update to a task's own state as the graph would: lists append."""
    merged = cast(dict[str, Any], local)
    for key, value in update.items():
        merged[key] = merged.get(key, []) + value if key in ("flags", "notes", "trail") else value


def _checks(state: RefundState) -> list[OrderCheck]:
    """The ticket's orders' checks, in the ticket's order."""
    checks = state.get("checks") or {}
    return [checks[n] for n in state.get("order_numbers", []) if n in checks]


def gather(state: RefundState) -> RefundState:
    """Every order checked: the ticket's amount is the sum of what the policy allows."""
    checks = _checks(state)
    first = checks[0]
    open_ = [c for c in checks if c["refundable"]]
    flags = [f"Order {c['number']}: {flag}" for c in open_ for flag in c["flags"]]
    declined = [c for c in checks if not c["refundable"]]
    notes = [
        f"{len(checks)} orders for {first['order']['customer_name']}: "
        f"{len(open_)} refundable ({dollars(sum(c['amount_cents'] for c in open_))}), "
        f"{len(declined)} declined by policy."
    ]
    return {
        "order": first["order"],
        "history": first["history"],
        "balance_cents": sum(c["balance_cents"] for c in checks),
        "amount_cents": sum(c["amount_cents"] for c in open_),
        "late_by_days": max(c["late_by_days"] for c in checks),
        "flags": flags,
        "notes": notes,
        "trail": ["gather"],
    }


def route_gathered(state: RefundState) -> Literal["decline", "triage"]:
    return "triage" if any(c["refundable"] for c in _checks(state)) else "decline"


def _review_orders(state: RefundState) -> list[ReviewOrder]:
    charges = state.get("charges") or {}
    lines: list[ReviewOrder] = []
    for check in _checks(state):
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


def send_charges(state: RefundState) -> list[Send] | Literal["email", "notify"]:
    """One charge_order per approved order not refunded yet; none left: the email (or, with
    nothing approved at all, the note of why not)."""
    charges = state.get("charges") or {}
    sends = [
        Send(
            "charge_order",
            ChargeTask(
                ticket_key=state["ticket_key"],
                number=check["number"],
                amount_cents=check["answer"]["amount_cents"],
            ),
        )
        for check in _checks(state)
        if check.get("answer", {}).get("answer") == "approve"
        and not charges.get(check["number"], {}).get("receipt")
    ]
    if sends:
        return sends
    return "email" if any(c.get("receipt") for c in charges.values()) else "notify"


def order_charge_key(ticket_key: str, number: str, amount_cents: int) -> str:
    # charge_key's rule, per order: a re-run finds the first charge, a lower amount its own key.
    return f"{ticket_key}:charge_card:{number}:{amount_cents}"


def charge_order(task: ChargeTask, runtime: Runtime[Collaborators]) -> RefundState:
    """Move one order's money once, checked against that order's balance at charge time. A
    definite "no" is written down for settle_charges (a manager decides); an outcome not known
    propagates and stops the run, as charge_card's does."""
    number, amount = task["number"], task["amount_cents"]
    charge: OrderCharge = {"number": number, "amount_cents": amount}
    _stop_if_drained(runtime)
    try:
        charge["receipt"] = runtime.context.pay(
            key=order_charge_key(task["ticket_key"], number, amount),
            amount_cents=amount,
            order_number=number,
        )
    except ChargeRefused as exc:
        charge["error"] = str(exc)
    except RetryableGatewayError as exc:
        if _retry_charge(runtime):
            raise  # the RetryPolicy runs this order's task again, after its back-off
        charge["error"] = f"the gateway stayed unavailable ({exc})"
    note = (
        f"Order {number}: charged {dollars(amount)}, receipt {charge['receipt']}."
        if charge.get("receipt")
        else f"Order {number}: charge refused: {charge['error']}. No money moved."
    )
    return {"charges": {number: charge}, "notes": [note], "trail": [f"charge_order:{number}"]}


def settle_charges(state: RefundState) -> Command[Literal["email", "approve"]]:
    """Every charge of the fan-out answered: a refused one goes back to a manager (the others
    stay paid), else on to the one email."""
    charges = state.get("charges") or {}
    refused = {
        c["number"]: charges[c["number"]].get("error", "")
        for c in _checks(state)
        if (c.get("answer") or {}).get("answer") == "approve"
        and charges.get(c["number"], {}).get("error")
        and not charges[c["number"]].get("receipt")
    }
    paid = sum(c["amount_cents"] for c in charges.values() if c.get("receipt"))
    if refused:
        why = "; ".join(f"order {n}: {e}" for n, e in refused.items())
        return Command(
            update={
                "payment_error": why,
                "required_role": "manager",
                # The refused orders' charge entries are dropped, so the re-review asks again.
                "charges": {n: {"number": n, "amount_cents": 0} for n in refused},
                "amount_cents": paid,
                "notes": [f"Charge refused ({why}); {dollars(paid)} paid stands."],
                "trail": ["payment_failed"],
            },
            goto="approve",
        )
    receipts = ", ".join(c["receipt"] for c in charges.values() if c.get("receipt"))
    return Command(
        update={
            "receipt": receipts,
            "payment_error": "",
            "amount_cents": paid,
            "trail": ["settle_charges"],
        },
        goto="email",
    )


def several_lines(state: RefundState) -> tuple[list[str], list[str]]:
    """The email's two lists: what was refunded, and what was not and why."""
    charges = state.get("charges") or {}
    refunded, not_refunded = [], []
    for check in _checks(state):
        number = check["number"]
        charge = charges.get(number, {})
        answer = check.get("answer") or {}
        if charge.get("receipt"):
            refunded.append(
                f"- Order {number}: {dollars(charge['amount_cents'])} (receipt {charge['receipt']})"
            )
        elif not check["refundable"]:
            not_refunded.append(f"- Order {number}: {check['declined_reason']}")
        else:
            why = answer.get("reason") or state.get("outcome_reason") or "not approved"
            # The reviewer's words as they wrote them (a sentence of its own, often with its own
            # full stop: in brackets it read "(… already.).").
            not_refunded.append(f"- Order {number}: not refunded: {why}")
    return refunded, not_refunded


def several_email_body(state: RefundState, *, refunded_words: bool) -> str:
    refunded, not_refunded = several_lines(state)
    parts = [f"Hello {state['order']['customer_name']},", ""]
    if refunded_words and refunded:
        parts += ["We refunded the shipping fee of these orders:", *refunded, ""]
    if not_refunded:
        parts += ["We could not refund these:", *not_refunded, ""]
    parts += ["Reply to this message if something is not right.", "", "Refund Desk"]
    return "\n".join(parts)
