"""Messages to the customer, each once per key, and the customer's refund record in the store."""

from __future__ import annotations

from langgraph.runtime import Runtime
from langgraph.types import RetryPolicy

from refunds import policy
from refunds.flow import parts as refund_parts
from refunds.flow.errors import MailRefused, MailRetryable
from refunds.flow.nodes.checks import declined_facts
from refunds.flow.nodes.common import attempt, customer_namespace, ordered_checks, reason_of
from refunds.flow.state import Collaborators, OrderCheck, OrderFacts, RefundState
from refunds.flow.words import dollars, percent_of

# When the retries run out the refund stands; the email shows as not delivered, with a Resend.
MAIL_RETRY = RetryPolicy(
    max_attempts=4,
    initial_interval=1.0,
    backoff_factor=2.0,
    max_interval=8.0,
    retry_on=MailRetryable,
)


def email_key(ticket_key: str, failed: int = 0) -> str:
    """Once per ticket, and once more per refund the processor failed (keyed as its charge)."""
    return f"{ticket_key}:email" + (f":again{failed}" if failed else "")


def notify_key(state: RefundState) -> str:
    # Each fork's outcome is its own message; a re-run of the same fork's notify is not.
    forks = state.get("forks", 0)
    return f"{state['ticket_key']}:notify" + (f":fork{forks}" if forks else "")


def refund_failed_key(ticket_key: str, receipt: str) -> str:
    return f"{ticket_key}:refund_failed:{receipt}"  # once per failed refund


def refund_failed_facts(order: OrderFacts, amount_cents: int) -> dict:
    """The facts of the `refund_failed` email, which the runner hands to the mailer."""
    return {
        "customer_name": order["customer_name"],
        "number": order["number"],
        "amount_cents": amount_cents,
    }


def received_key(ticket_key: str) -> str:
    return f"{ticket_key}:received"  # once per ticket: a fork's second review says nothing new


def language_of(state: RefundState) -> str:
    """The customer's message's language ("" when none: the mailer writes in English)."""
    return str((state.get("reading") or {}).get("language") or "")


def to_customer(
    runtime: Runtime[Collaborators], state: RefundState, key: str, kind: str, facts: dict
) -> str:
    """Hand the mailer a kind of email and its facts; "" when delivered, else why not."""
    order = state["order"]
    try:
        runtime.context.send_mail(
            key=key,
            to=order["customer_email"],
            kind=kind,
            facts={"customer_name": order["customer_name"], **facts},
            language=language_of(state),
        )
    except MailRefused as exc:
        return str(exc)
    except MailRetryable as exc:
        if attempt(runtime) < MAIL_RETRY.max_attempts:
            raise  # the RetryPolicy runs the node again, with backoff
        return str(exc)
    return ""


def received(state: RefundState, runtime: Runtime[Collaborators]) -> RefundState:
    """Tell the customer a person will look, now that one must (TICKET_TELLS; triage routes)."""
    order = state["order"]
    error = to_customer(
        runtime,
        state,
        received_key(state["ticket_key"]),
        "received",
        {"orders": list(state["order_numbers"])},
    )
    note = (
        f"Told {order['customer_email']} a person will look at it."
        if not error
        else f"Email that a person will look at it not delivered: {error}."
    )
    return {"notes": [note], "trail": ["received"]}


def notify(state: RefundState, runtime: Runtime[Collaborators]) -> RefundState:
    """Tell the customer why there is no refund; a message sent back as misread is no refusal."""
    order = state["order"]
    if (state.get("decision") or {}).get("sent_back"):
        note = "Nothing sent to the customer: the message went back to Needs sorting."
        return {"notes": [note], "trail": ["notify"]}
    error = to_customer(runtime, state, notify_key(state), "refused", order_facts(state))
    note = f"Told {order['customer_email']} why." if not error else f"Email not delivered: {error}."
    return {"email_delivered": not error, "notes": [note], "trail": ["notify"]}


def _why_refunded(state: RefundState) -> dict:
    reason = reason_of(state)
    if reason == policy.LATE_DELIVERY:
        return {"late_by_days": state["late_by_days"]}
    return {"reason": reason}  # one of policy.REASONS, worded by the template


def email(state: RefundState, runtime: Runtime[Collaborators]) -> RefundState:
    """Confirm the refund. Paid means refunded, whatever the mail server says."""
    order = state["order"]
    amount = state["amount_cents"]
    paid = [c for c in (state.get("charges") or {}).values() if c.get("receipt")]
    error = to_customer(
        runtime,
        state,
        email_key(
            state["ticket_key"],
            sum(check.get("refunds_failed", 0) for check in (state.get("checks") or {}).values()),
        ),
        "refunded",
        order_facts(state) | {"why": _why_refunded(state)},
    )
    if runtime.store is not None:
        # Keyed by the ticket and the order: a re-run writes the same records, not second ones.
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


def parts_given(check: OrderCheck, *, came: bool = True) -> list[dict]:
    """For the email ([] for the fee alone); `came` False: never tell to keep what never came."""
    parts = (check.get("answer") or {}).get("parts") or []
    if not parts or refund_parts.only_shipping(parts):
        return []
    titles = {line["id"]: line["title"] for line in check["order"].get("lines") or []}
    items: list[dict] = []
    for part in parts:
        if part.get("shipping"):
            items.append({"shipping": True, "amount_cents": part["amount_cents"]})
        else:
            items.append(
                {
                    "quantity": part["quantity"],
                    "title": titles.get(part["line"], ""),
                    "amount_cents": part["amount_cents"],
                    "restock": bool(part.get("restock")),
                }
                | ({} if came else {"missing": True})
                | ({"back": True} if (check.get("answer") or {}).get("returned") else {})
            )
    return items


def order_facts(state: RefundState) -> dict:
    """Each order's part of the outcome, and the totals, for the refund and refusal emails."""
    charges = state.get("charges") or {}
    refunded: list[dict] = []
    not_refunded: list[dict] = []
    asked_in_all = 0  # what the customer asked for, every order a person reviewed
    for check in ordered_checks(state):
        number = check["number"]
        charge = charges.get(number, {})
        answer = check.get("answer") or {}
        # A proposal of nothing asked for no sum: a refund is never "part of" the balance.
        proposed = check.get("amount_cents")
        asked = proposed if proposed is not None else check.get("balance_cents") or 0
        if check["refundable"]:
            asked_in_all += max(
                asked, charge.get("amount_cents", 0) if charge.get("receipt") else 0
            )
        if charge.get("receipt"):
            paid = charge["amount_cents"]
            refunded.append(
                {
                    "number": number,
                    "asked_cents": max(asked, paid),
                    "paid_cents": paid,
                    "receipt": charge["receipt"],
                    "part": paid < asked,
                    # The reviewer's reason for that order, never another's.
                    "why_part": str(answer.get("reason") or "") if paid < asked else "",
                    "rest_not_back": bool(answer.get("returned")) and paid < asked,
                    # Paid as store credit: what the customer holds, with the shop's bonus.
                    "credit_cents": paid + percent_of(paid, check.get("credit_bonus_percent", 0))
                    if answer.get("credit")
                    else 0,
                    "given": parts_given(check, came=reason_of(state) != policy.NOT_RECEIVED),
                }
            )
        elif not check["refundable"]:
            as_checked: RefundState = {
                "order": check["order"],
                "late_by_days": check["late_by_days"],
                "reason": reason_of(state),
            }
            not_refunded.append({"number": number, "declined": declined_facts(as_checked)})
        else:
            why = answer.get("reason") or state.get("outcome_reason") or ""
            if answer.get("not_back"):  # worded by the template, in the customer's language
                not_refunded.append({"number": number, "not_back": True})
            else:
                not_refunded.append({"number": number, "why_not": why})
    return {
        "orders": list(state["order_numbers"]),
        "refunded": refunded,
        "not_refunded": not_refunded,
        "asked_cents": asked_in_all,
        "paid_cents": sum(o["paid_cents"] for o in refunded),
        "part": any(o["part"] for o in refunded),
        "given": any(o["given"] for o in refunded),
        "credited": any(o["credit_cents"] for o in refunded),
        "to_bank": any(not o["credit_cents"] for o in refunded),
    }
