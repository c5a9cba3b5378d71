"""Before the review: pure reads, one check_order per order, gathered for triage or decline."""

from __future__ import annotations

from collections.abc import Callable
from datetime import date, timedelta
from typing import Any, Literal, cast

from langgraph.runtime import Runtime
from langgraph.types import Send

from refunds import policy
from refunds.flow import parts as refund_parts
from refunds.flow.errors import OrderNotFound
from refunds.flow.nodes.common import customer_namespace, ordered_checks, reason_of
from refunds.flow.state import (
    CheckTask,
    Collaborators,
    CustomerHistory,
    OrderCheck,
    OrderFacts,
    Part,
    RefundState,
)
from refunds.flow.words import days, dollars

HISTORY_FLAG_AT = 3  # this many earlier refunds sends the next one to a manager
RECENT_DAYS = 30
RECENT_FLAG_AT = 2  # two refunds in the last 30 days: the third goes to a manager
FEE_FLAG_CENTS = 10_000  # a shipping fee above $100 is unusual enough for a second look

Step = Callable[[RefundState, Runtime[Collaborators]], RefundState]


def lookup(state: RefundState, runtime: Runtime[Collaborators]) -> RefundState:
    order = runtime.context.find_order(state["order_number"])
    if order is None:
        raise OrderNotFound(f"order {state['order_number']} does not exist")
    fee, paid = order["fee_cents"], order.get("paid_cents")
    balance = balance_of(order)
    notes = [f"Order {order['number']} for {order['customer_name']}."]
    if paid is not None and paid < fee and not order.get("lines"):
        notes.append(
            f"The customer paid {dollars(paid)}, less than the {dollars(fee)} fee: no more than "
            "that is refunded."
        )
    if order.get("outside_refunded_cents"):
        notes.append(
            f"{dollars(order['outside_refunded_cents'])} of the payment was refunded outside the "
            "desk (at the payment processor)."
        )
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


def balance_of(order: OrderFacts) -> int:
    """What it came to, or was paid if less, less what the desk refunded of it."""
    bought = order["fee_cents"] + sum(
        line["unit_price_cents"] * line["quantity"] + line["tax_cents"]
        for line in order.get("lines") or []
    )
    paid = order.get("paid_cents")
    return max(min(bought, bought if paid is None else paid) - order.get("refunded_cents", 0), 0)


def reproposed(check: OrderCheck, order: OrderFacts, reason: str, words: str) -> OrderCheck:
    """Proposed anew over the order as it is: a review after a charge offers what can be paid."""
    local: RefundState = {
        "order": order,
        "balance_cents": balance_of(order),
        "late_by_days": check["late_by_days"],
        "reason": reason,
    }
    parts, why = _proposal(local, words, refundable=True)
    return {
        **check,
        "order": order,
        "balance_cents": local["balance_cents"],
        "amount_cents": refund_parts.total(parts),
        "parts": parts,
        "parts_why": why,
    }


def fraud_check(state: RefundState) -> RefundState:
    flags = []
    if state["order"]["fee_cents"] > FEE_FLAG_CENTS:
        flags.append(f"Shipping fee {dollars(state['order']['fee_cents'])} is unusually high.")
    return {"flags": flags, "trail": ["fraud_check"]}


def history_check(state: RefundState, runtime: Runtime[Collaborators]) -> RefundState:
    refunds = []
    if runtime.store is not None:
        items = runtime.store.search(
            customer_namespace(state["order"]["customer_email"]), limit=1000
        )
        own = state["ticket_key"]
        # Keyed "<ticket>:<order>", or "<ticket>" before version 5: both counted once.
        seen: dict[tuple[str, str], dict[str, Any]] = {}
        for item in items:
            order = str(item.value.get("order", ""))
            ticket = item.key.removesuffix(f":{order}") if order else item.key
            if ticket != own:
                seen.setdefault((ticket, order), item.value)
        refunds = list(seen.values())
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


def check_policy(state: RefundState) -> RefundState:
    order = state["order"]
    late = (
        date.fromisoformat(order["delivered_on"]) - date.fromisoformat(order["promised_on"])
    ).days
    if not policy.routes_by_lateness(reason_of(state)):
        note = policy.reason_sentence(reason_of(state))
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
    # Lateness decides a late delivery only; other reasons go to a review while anything is left.
    late = state["late_by_days"] > 0 or not policy.routes_by_lateness(reason_of(state))
    return "triage" if late and state["balance_cents"] > 0 else "decline"


def declined_facts(check: RefundState) -> dict:
    """Why the policy refunds none of one order's fee, as facts the email words."""
    order = check["order"]
    if check["late_by_days"] > 0 or not policy.routes_by_lateness(reason_of(check)):
        return {  # nothing left to refund
            "refunded_cents": order["refunded_cents"],
            "refunded_by_ticket": order["refunded_by_ticket"],
        }
    return {"early_days": -check["late_by_days"]}


def declined_reason(check: RefundState) -> str:
    """declined_facts in the desk's words."""
    facts = declined_facts(check)
    if "refunded_cents" in facts:
        return (
            f"The shipping fee of order {check['order']['number']} was already refunded in full "
            f"({dollars(facts['refunded_cents'])}, ticket {facts['refunded_by_ticket']})."
        )
    early = facts["early_days"]
    when = "on time" if early == 0 else f"{days(early)} early"
    return f"Your order arrived {when}, so the shipping fee isn't refundable."


def decline(state: RefundState) -> RefundState:
    """The policy refunds none of the ticket's orders."""
    checks = ordered_checks(state)
    if len(checks) == 1:
        reason = checks[0]["declined_reason"]
    else:
        reason = " ".join(f"Order {c['number']}: {c['declined_reason']}" for c in checks)
    return {"outcome": "declined", "outcome_reason": reason, "trail": ["decline"]}


def fan_out(state: RefundState) -> list[Send]:
    return [
        Send(
            "check_order",
            CheckTask(
                ticket_key=state["ticket_key"],
                order_number=number,
                reason=reason_of(state),
                words=customer_words(state),
            ),
        )
        for number in state["order_numbers"]
    ]


def make_check_order(carrier: Step | None = None) -> Callable[..., RefundState]:
    """The per-order check; `carrier`: the tracking lookup, where one is configured."""
    steps: list[Step] = [lookup, lambda s, _: fraud_check(s), history_check]
    if carrier is not None:
        steps.append(carrier)
    steps.append(lambda s, _: check_policy(s))

    def check_order(task: CheckTask, runtime: Runtime[Collaborators]) -> RefundState:
        """Pure reads, so a task that dies is simply run again."""
        local: RefundState = {
            "ticket_key": task["ticket_key"],
            "order_number": task["order_number"],
            "reason": task["reason"],
        }
        for step in steps:
            _fold(local, step(local, runtime))
        refundable = route_policy(local) == "triage"
        number = local["order"]["number"]
        parts, why = _proposal(local, task.get("words", ""), refundable)
        check: OrderCheck = {
            "number": number,
            "order": local["order"],
            "balance_cents": local["balance_cents"],
            "amount_cents": refund_parts.total(parts),
            "parts": parts,
            "parts_why": why,
            "late_by_days": local["late_by_days"],
            "refundable": refundable,
            "declined_reason": "" if refundable else declined_reason(local),
            "flags": local.get("flags", []),
            "notes": local.get("notes", []) + ([why] if local["order"].get("lines") else []),
            "history": local["history"],
        }
        if "tracking" in local:
            check["tracking"] = local["tracking"]
        if refundable and policy.return_first(
            runtime.context.return_rule, reason_of(local), parts, local["history"]
        ):
            check["on_return"] = True
        if refundable and (rule := runtime.context.store_credit) is not None:
            check["credit"] = "only" if reason_of(local) in rule.only_reasons else "offer"
            check["credit_bonus_percent"] = rule.bonus_percent
        return {"checks": {number: check}, "trail": [f"check_order:{number}"]}

    return check_order


def _proposal(local: RefundState, words: str, refundable: bool) -> tuple[list[Part], str]:
    """What the policy proposes for one order; without lines, its balance as the shipping fee."""
    if not refundable:
        return [], ""
    order = local["order"]
    if not order.get("lines"):
        return [refund_parts.shipping(local["balance_cents"])], "The shipping fee."
    return policy.proposed_parts(reason_of(local), order, words, late_by_days=local["late_by_days"])


def customer_words(state: RefundState) -> str:
    """What the customer wrote, as far as the ticket keeps it."""
    reading = state.get("reading") or {}
    quotes = reading.get("quotes") or {}
    return " ".join([state.get("note", ""), reading.get("summary", ""), *quotes.values()])


def _fold(local: RefundState, update: RefundState) -> None:
    """Apply a step's update to a task's own state as the graph would: lists append."""
    merged = cast(dict[str, Any], local)
    for key, value in update.items():
        merged[key] = merged.get(key, []) + value if key in ("flags", "notes", "trail") else value


def gather(state: RefundState) -> RefundState:
    """The ticket's amount is the sum of what the policy allows."""
    checks = ordered_checks(state)
    first = checks[0]
    open_ = [c for c in checks if c["refundable"]]
    update: RefundState = {
        "order": first["order"],
        "history": first["history"],
        "balance_cents": sum(c["balance_cents"] for c in checks),
        "amount_cents": sum(c["amount_cents"] for c in open_),
        "late_by_days": max(c["late_by_days"] for c in checks),
        "trail": ["gather"],
    }
    if len(checks) == 1:
        update |= {"flags": list(first["flags"]), "notes": list(first["notes"])}
        if "tracking" in first:
            update["tracking"] = first["tracking"]
        return update
    declined = [c for c in checks if not c["refundable"]]
    return update | {
        "flags": [f"Order {c['number']}: {flag}" for c in open_ for flag in c["flags"]],
        "notes": [
            f"{len(checks)} orders for {first['order']['customer_name']}: "
            f"{len(open_)} refundable ({dollars(sum(c['amount_cents'] for c in open_))}), "
            f"{len(declined)} declined by policy."
        ],
    }


def route_gathered(state: RefundState) -> Literal["decline", "triage"]:
    return "triage" if any(c["refundable"] for c in ordered_checks(state)) else "decline"
