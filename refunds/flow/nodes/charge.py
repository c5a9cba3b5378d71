"""The charge: each approved order's money moved once per key; a definite "no" to a manager."""

from __future__ import annotations

import time
from typing import Literal

from langgraph.runtime import Runtime
from langgraph.types import Command, RetryPolicy, Send

from refunds.flow import parts as refund_parts
from refunds.flow.errors import ChargeRefused, PaymentDisputed, RetryableGatewayError
from refunds.flow.nodes.checks import customer_words, reproposed
from refunds.flow.nodes.common import attempt, ordered_checks, reason_of, stop_if_drained
from refunds.flow.state import ChargeTask, Collaborators, OrderCharge, OrderCheck, Part, RefundState
from refunds.flow.words import dollars, percent_of

# A gateway that is down is tried again with the same key (harmless: a repeated key gets the
# first result) for `charge_retry_seconds`, under the run's lease; the attempts only bound it.
CHARGE_RETRY = RetryPolicy(
    max_attempts=100,
    initial_interval=0.5,
    backoff_factor=2.0,
    max_interval=5.0,
    retry_on=RetryableGatewayError,
)


def _retry_charge(runtime: Runtime[Collaborators]) -> bool:
    stop_if_drained(runtime)
    info = runtime.execution_info
    started = info.node_first_attempt_time if info is not None else None
    spent = time.time() - started if started is not None else 0.0
    return (
        attempt(runtime) < CHARGE_RETRY.max_attempts
        and spent < runtime.context.charge_retry_seconds
    )


def charge_key(
    ticket_key: str, number: str, amount_cents: int, parts: list[Part] | None = None
) -> str:
    # Never random: a re-run returns the first charge; a corrected amount or other parts get a
    # key of their own (a key holds the parts it was first made with). The fee alone keeps the
    # key it had before parts.
    key = f"{ticket_key}:charge_card:{number}:{amount_cents}"
    if parts and not refund_parts.only_shipping(parts):
        key += f":{refund_parts.digest(parts)}"
    return key


def _key(state: RefundState, check: OrderCheck, amount_cents: int, parts: list[Part]) -> str:
    # After a refund the processor failed, a new refund: the failed one stays under its key.
    failed = check.get("refunds_failed", 0)
    if failed:
        key = charge_key(state["ticket_key"], check["number"], amount_cents, parts)
        return f"{key}:again{failed}"
    # A thread approved under flow version 4 keeps the key its charge may have been made with.
    carried = check.get("carried_key") and check.get("carried_key_cents") == amount_cents
    if carried and refund_parts.only_shipping(parts):
        return check["carried_key"]
    return charge_key(state["ticket_key"], check["number"], amount_cents, parts)


def send_charges(state: RefundState) -> list[Send] | Literal["email", "notify"]:
    """One charge_order per approved order not refunded yet; none left: the email, or notify."""
    charges = state.get("charges") or {}
    sends = []
    for check in ordered_checks(state):
        answer = check.get("answer") or {}
        if answer.get("answer") != "approve" or charges.get(check["number"], {}).get("receipt"):
            continue
        amount, parts = answer["amount_cents"], answer["parts"]
        key = _key(state, check, amount, parts)
        if answer.get("credit"):  # store credit: a key of its own, never the card refund's
            key = key.replace(":charge_card:", ":store_credit:", 1)
        task = ChargeTask(
            ticket_key=state["ticket_key"],
            key=key,
            number=check["number"],
            amount_cents=amount,
            parts=parts,
        )
        if answer.get("credit"):
            task["credit_bonus_cents"] = percent_of(amount, check.get("credit_bonus_percent", 0))
        if answer.get("dispute_seen"):
            task["dispute_seen"] = True
        sends.append(Send("charge_order", task))
    if sends:
        return sends
    return "email" if any(c.get("receipt") for c in charges.values()) else "notify"


def charge_order(task: ChargeTask, runtime: Runtime[Collaborators]) -> RefundState:
    """Only a definite "no" goes to a manager; an unknown outcome stops the run (a lookup next)."""
    number, amount = task["number"], task["amount_cents"]
    charge: OrderCharge = {"number": number, "amount_cents": amount}
    stop_if_drained(runtime)
    try:
        # Said only when set: a payer from before disputes is called as it always was.
        seen = {"dispute_seen": True} if task.get("dispute_seen") else {}
        if "credit_bonus_cents" in task:
            if runtime.context.credit is None:
                raise ChargeRefused("store credit is not offered any more (REFUNDS_STORE_CREDIT)")
            charge["receipt"] = runtime.context.credit(
                key=task["key"],
                amount_cents=amount,
                bonus_cents=task["credit_bonus_cents"],
                order_number=number,
                parts=task["parts"],
            )
        else:
            charge["receipt"] = runtime.context.pay(
                key=task["key"],
                amount_cents=amount,
                order_number=number,
                parts=task.get("parts"),
                **seen,
            )
    except PaymentDisputed as exc:
        charge["error"], charge["disputed"] = str(exc), True
    except ChargeRefused as exc:
        charge["error"] = str(exc)
    except RetryableGatewayError as exc:
        if _retry_charge(runtime):
            raise  # the RetryPolicy runs this order's task again, after its back-off
        charge["error"] = f"the gateway stayed unavailable ({exc})"
    note = (
        f"Order {number}: charged {dollars(amount)}, receipt {charge['receipt']}."
        if charge.get("receipt")
        else f"Order {number}: charge refused: {charge['error'].rstrip('.')}. No money moved."
    )
    return {"charges": {number: charge}, "notes": [note], "trail": [f"charge_order:{number}"]}


def settle_charges(
    state: RefundState, runtime: Runtime[Collaborators]
) -> Command[Literal["email", "approve"]]:
    """A refused charge goes back to a manager (the others stay paid); else the one email."""
    charges = state.get("charges") or {}
    refused = {
        c["number"]: charges[c["number"]].get("error", "")
        for c in ordered_checks(state)
        if (c.get("answer") or {}).get("answer") == "approve"
        and charges.get(c["number"], {}).get("error")
        and not charges[c["number"]].get("receipt")
    }
    paid = sum(c["amount_cents"] for c in charges.values() if c.get("receipt"))
    if refused:
        if len(ordered_checks(state)) == 1:
            why = "; ".join(refused.values())
        else:
            why = "; ".join(f"order {n}: {e}" for n, e in refused.items())
        stands = f"{dollars(paid)} paid stands" if paid else "No money moved"
        return Command(
            update={
                "payment_error": why,
                "required_role": "manager",
                # Dropped, so the re-review asks again; a dispute keeps saying so.
                "charges": {n: _dropped(n, charges[n]) for n in refused},
                "checks": {n: _anew(state, runtime, n) for n in refused},
                "amount_cents": paid,
                "notes": [f"Charge refused: {why.rstrip('.')}. {stands}."],
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


def _anew(state: RefundState, runtime: Runtime[Collaborators], number: str) -> OrderCheck:
    check = (state.get("checks") or {})[number]
    order = runtime.context.find_order(number) or check["order"]
    anew = reproposed(check, order, reason_of(state), customer_words(state))
    if (check.get("answer") or {}).get("returned"):  # the goods are back: never asked twice
        anew.pop("on_return", None)
        anew["notes"] = [*anew["notes"], "The goods came back; what is left is refunded at once."]
    return anew


def _dropped(number: str, charge: OrderCharge) -> OrderCharge:
    dropped: OrderCharge = {"number": number, "amount_cents": 0}
    if charge.get("disputed"):
        dropped["disputed"] = True
    return dropped
