"""State shapes across flow versions. No Django imports.

Every thread is stamped with the flow version it started under (`flow_version` in its state and
on its Ticket row). When a release changes the state's shape, it bumps FLOW_VERSION and adds
UPGRADES[old]: a function from a state of version `old` to the update that makes it version
`old + 1`. `manage.py upgrade_threads` carries every open thread across, through the runner
(`advance(carry=True)`), which sends that update with the thread's next command: with the resume
of an answer recorded, `Command(resume={interrupt_id: answer}, update=...)`; a review still
waiting, `Command(update=...)`, so `approve` asks again on the new shape under the same interrupt
id; a thread with work left, `Command(update=..., goto=...)`. LangGraph applies it before the
node runs, and no extra checkpoint or branch is made. The runner runs no other thread of an
older version.

History:
- 1: the first shape.
- 2: optional `tracking` (the carrier's lookup) and `history.recent` (refunds in the last 30
  days). Nothing reads them from a state that lacks them, so a version 1 state needs only its
  stamp; a reviewer's card shows no 30-day count for it.
- 3: `reason` (why the customer asks; the policy routes by it) and `reading` (what the intake
  read from their message). A thread paused before them was opened by order number for a late
  delivery: it carries on as one, with no reading.
- 4: `order_numbers` (a ticket covers one or more orders), `checks` and `charges` (the fan-outs'
  per-order results). A thread from before covers its one order: it gets `order_numbers`.
- 5: one path for one order or several; the one-order nodes (lookup, fraud_check, history_check,
  carrier_tracking, check_policy, charge_card) are gone. A one-order thread of version 4 gets the
  per-order `checks` its own checks found, its review's answer, its charge's receipt, and the key
  its charge was made with (`carried_key`, honoured for that amount, so a thread paused after or
  during its charge never charges again). One that was to run a node that is gone goes on where
  that node's work is done now (`resume_at`): its checks (pure reads) on the one path, or the
  charge of its order under that key.
- 6: a refund is a set of parts of an order (`Part`: units of a line, or the shipping fee). The
  order's facts gain `lines` and `shipping_refunded_cents`, each check the policy's proposal
  (`parts`, `parts_why`), an approval and a charge task their `parts`, a check task the
  customer's `words`. A thread of version 5 gets the shipping fee for its amount as each
  check's proposal and each approval's parts (so a review approved under version 5 ends as it
  would have, under the same charge key); facts without lines read as an order without lines.
- 7: a review may ask the customer: `asking` (the question being sent or waited on) and
  `replies` (the questions answered, with the customer's words). A thread of version 6 never
  asked: it needs only its stamp (every reader takes a missing `asking` as none and missing
  `replies` as none), and its paused review may be answered "ask" once carried over.
  Later, without a new shape (no bump): a wait that ends without a reply may close the ticket
  (`close_no_reply`, then the interrupt `await_reopen`); `await_reply` routes by Command instead
  of its edge to `approve`. No key was added, and a thread paused at `await_reply` resumes the
  same node, so a paused version 7 thread needs nothing (tests/test_ask_customer.py).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, cast

from langgraph.types import Send

from refunds.flow import parts as refund_parts
from refunds.flow.nodes.charge import send_charges
from refunds.flow.nodes.checks import declined_reason, fan_out, route_policy
from refunds.flow.state import FLOW_VERSION, CustomerHistory, OrderCheck, RefundState
from refunds.policy import LATE_DELIVERY

Upgrade = Callable[[dict[str, Any]], dict[str, Any]]


def _stamp(values: dict[str, Any]) -> dict[str, Any]:  # the new keys read as absent
    return {}


def _to_3(values: dict[str, Any]) -> dict[str, Any]:
    return {"reason": LATE_DELIVERY, "reading": None}


def _to_4(values: dict[str, Any]) -> dict[str, Any]:
    return {"order_numbers": [values["order_number"]]} if values.get("order_number") else {}


def _to_5(old: dict[str, Any]) -> dict[str, Any]:
    values = cast(RefundState, old)
    numbers = values.get("order_numbers") or []
    if len(numbers) != 1 or values.get("checks") or "late_by_days" not in values:
        # Several orders ran the per-order path already; a thread before its checks runs them.
        return {}
    (number,) = numbers
    refundable = route_policy(values) == "triage"
    amount = values["amount_cents"] if refundable else 0
    check: OrderCheck = {
        "number": number,
        "order": values["order"],
        "balance_cents": values["balance_cents"],
        "amount_cents": amount,
        "late_by_days": values["late_by_days"],
        "refundable": refundable,
        "declined_reason": "" if refundable else declined_reason(values),
        "flags": list(values.get("flags") or []),
        "notes": [],  # the ticket's notes hold them already
        "history": values.get("history") or CustomerHistory(refunds=0, total_cents=0),
    }
    if "tracking" in values:
        check["tracking"] = values["tracking"]
    update: dict[str, Any] = {}
    decision = values.get("decision") or {}
    if decision.get("answer") == "approve":
        check["answer"] = {"answer": "approve", "amount_cents": amount}
        check["carried_key"] = f"{values['ticket_key']}:charge_card:{amount}"
        check["carried_key_cents"] = amount
    elif decision.get("answer") == "reject":
        check["answer"] = {"answer": "reject", "reason": decision.get("reason", "")}
    if values.get("receipt"):
        update["charges"] = {
            number: {"number": number, "amount_cents": amount, "receipt": values["receipt"]}
        }
    return update | {"checks": {number: check}}


def _to_6(values: dict[str, Any]) -> dict[str, Any]:
    # Before parts a refund was its order's shipping fee: each check proposed it for its amount,
    # each approval refunded it (under the same charge key: a key names only the fee's amount).
    checks: dict[str, Any] = {}
    for number, check in (values.get("checks") or {}).items():
        fee = check["amount_cents"]
        check = {"parts": [refund_parts.shipping(fee)] if fee else [], "parts_why": ""} | check
        answer = check.get("answer") or {}
        if answer.get("answer") == "approve" and "parts" not in answer:
            check["answer"] = answer | {"parts": [refund_parts.shipping(answer["amount_cents"])]}
        checks[number] = check
    return {"checks": checks} if checks else {}


UPGRADES: dict[int, Upgrade] = {1: _stamp, 2: _to_3, 3: _to_4, 4: _to_5, 5: _to_6, 6: _stamp}


def resume_at(old: dict[str, Any]) -> list[Send]:
    """Where a carried-over thread goes on when the node it was to run is gone: a state of
    version 4 whose checks had not finished runs its orders' checks (pure reads); one approved
    and not charged (it was to run charge_card) goes on to the charge of its order, under the
    key it may already have been made with. [] for any other."""
    values = cast(RefundState, old)
    if values.get("outcome") or values.get("receipt"):
        return []
    if not values.get("checks"):
        return fan_out(values)
    sends = send_charges(values)
    return sends if isinstance(sends, list) else []


def version_of(values: dict[str, Any] | None) -> int:
    return int((values or {}).get("flow_version") or 1)


def upgrade(values: dict[str, Any] | None, target: int | None = None) -> dict[str, Any]:
    """The update that carries a state to `target` (FLOW_VERSION); {} when it is there."""
    target = FLOW_VERSION if target is None else target
    state = dict(values or {})
    version = version_of(state)
    if version >= target:
        return {}
    update: dict[str, Any] = {}
    while version < target:
        step = UPGRADES[version](state) | {"flow_version": version + 1}
        # Reducer keys (lists) are appended by LangGraph: an upgrade that writes one adds to it.
        state |= step
        update |= step
        version += 1
    return update
