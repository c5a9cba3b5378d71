"""Messages to the customer: the refund's confirmation (`email`) and why there is none (`notify`),
sent through the outbox with keys of their own, and the customer's refund record in the store."""

from __future__ import annotations

from langgraph.runtime import Runtime
from langgraph.types import RetryPolicy

from refunds import policy
from refunds.flow.errors import (
    MailRefused,
    MailRetryable,
)
from refunds.flow.nodes.common import (
    attempt,
    customer_namespace,
    ordered_checks,
    reason_of,
)
from refunds.flow.state import (
    Collaborators,
    OrderFacts,
    RefundState,
)
from refunds.flow.words import days, dollars, your_orders

# A mail server that refuses for a while is tried again with backoff; when the retries run out the
# refund stands and the email shows as not delivered, with a Resend for admins.
MAIL_RETRY = RetryPolicy(
    max_attempts=4,
    initial_interval=1.0,
    backoff_factor=2.0,
    max_interval=8.0,
    retry_on=MailRetryable,
)


def _deliver(runtime: Runtime[Collaborators], **message: str) -> str:
    """Send through the outbox; return "" when delivered, else why not (after the retries)."""
    try:
        runtime.context.send_mail(**message)
    except MailRefused as exc:
        return str(exc)
    except MailRetryable as exc:
        if attempt(runtime) < MAIL_RETRY.max_attempts:
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


def refund_failed_key(ticket_key: str, receipt: str) -> str:
    return f"{ticket_key}:refund_failed:{receipt}"  # once per failed refund


def refund_failed_email(order: OrderFacts, amount_cents: int, why: str) -> tuple[str, str]:
    """The customer's email when the processor fails a refund after it was started: (subject,
    body). `why` is the desk's sentence for the failure (refunds.selectors.refund_failure_words)."""
    subject = f"Your refund for order {order['number']} did not go through"
    body = (
        f"Hello {order['customer_name']},\n\n"
        f"The refund of {dollars(amount_cents)} for order {order['number']} did not reach you. "
        f"{why}\n\n"
        "A member of our team is looking at it and will write to you about what happens next.\n\n"
        "Refund Desk"
    )
    return subject, body


def received_key(ticket_key: str) -> str:
    return f"{ticket_key}:received"  # once per ticket: a fork's second review says nothing new


def received(state: RefundState, runtime: Runtime[Collaborators]) -> RefundState:
    """Tell the customer whose message opened the ticket that a person will look at it, now
    that one must (the review is next). Only a ticket the intake left this to (TICKET_TELLS;
    triage routes): one its checks decide at once sends only the outcome (`notify`), never an
    acknowledgment and a refusal a second apart."""
    order, numbers = state["order"], state["order_numbers"]
    which = your_orders(numbers)
    body = (
        f"Hello {order['customer_name']},\n\n"
        f"Thank you for writing to us. We have opened a refund request for {which}. Someone on "
        "our team will look at it, and we will email you again once it is decided.\n\n"
        "Refund Desk"
    )
    error = _deliver(
        runtime,
        key=received_key(state["ticket_key"]),
        to=order["customer_email"],
        subject=f"We got your refund request for {which.removeprefix('your ')}",
        body=body,
    )
    note = (
        f"Told {order['customer_email']} a person will look at it."
        if not error
        else f"Email that a person will look at it not delivered: {error}."
    )
    return {"notes": [note], "trail": ["received"]}


def notify(state: RefundState, runtime: Runtime[Collaborators]) -> RefundState:
    """Tell the customer why there is no refund (declined by policy or rejected by a reviewer).
    A message sent back as misread is not a refusal: nothing is sent, its next ticket answers."""
    order = state["order"]
    if (state.get("decision") or {}).get("sent_back"):
        note = "Nothing sent to the customer: the message went back to Needs sorting."
        return {"notes": [note], "trail": ["notify"]}
    if len(ordered_checks(state)) > 1:
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
    reason = reason_of(state)
    if reason == policy.LATE_DELIVERY:
        return f"which arrived {days(state['late_by_days'])} late"
    return f"about your report ({policy.REASONS[reason].lower()})"


def email(state: RefundState, runtime: Runtime[Collaborators]) -> RefundState:
    """Confirm the refund. Paid means refunded: a mail server that never accepts leaves the
    refund standing, with the email shown as not delivered."""
    order = state["order"]
    amount = state["amount_cents"]
    paid = [c for c in (state.get("charges") or {}).values() if c.get("receipt")]
    if len(ordered_checks(state)) > 1:
        subject = f"Your refund for orders {', '.join(state['order_numbers'])}"
        body = several_email_body(state, refunded_words=True)
    else:
        subject = f"Your refund for order {order['number']}"
        body = (
            f"Hello {order['customer_name']},\n\n"
            f"We refunded {dollars(amount)} in shipping for order {order['number']}, "
            f"{_why_refunded(state)}. Receipt: {state['receipt']}.\n\n"
            "Refund Desk"
        )
    error = _deliver(
        runtime,
        key=email_key(state["ticket_key"]),
        to=order["customer_email"],
        subject=subject,
        body=body,
    )
    if runtime.store is not None:
        # Keyed by the ticket and the order, so a re-run writes the same records again, not
        # second ones.
        for charge in paid:
            runtime.store.put(
                customer_namespace(order["customer_email"]),
                f"{state['ticket_key']}:{charge['number']}",
                {
                    "amount_cents": charge["amount_cents"],
                    "order": charge["number"],
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


def several_lines(state: RefundState) -> tuple[list[str], list[str]]:
    """The email's two lists: what was refunded, and what was not and why."""
    charges = state.get("charges") or {}
    refunded, not_refunded = [], []
    for check in ordered_checks(state):
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
