"""State shapes across flow versions (no Django): UPGRADES[old] makes a state of version `old`
one of `old + 1`; `manage.py upgrade_threads` carries open threads across. Each upgrade's comment
says why a paused thread needs only what it gives."""

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


def _stamp(values: dict[str, Any]) -> dict[str, Any]:
    # 2 (`tracking`, `history.recent`) and 7 (`asking`, `replies`: a review may ask the
    # customer): every reader takes a missing key as none, so the stamp is all they need.
    return {}


def _to_3(values: dict[str, Any]) -> dict[str, Any]:
    # `reason` and `reading`: a thread from before was opened by order number for a late delivery.
    return {"reason": LATE_DELIVERY, "reading": None}


def _to_4(values: dict[str, Any]) -> dict[str, Any]:
    # `order_numbers`, `checks`, `charges`: a thread from before covers its one order.
    return {"order_numbers": [values["order_number"]]} if values.get("order_number") else {}


def _to_5(old: dict[str, Any]) -> dict[str, Any]:
    # One path for one order or several: a one-order thread gets the per-order check its own
    # checks found, its answer, its receipt, and the key its charge was made with (`carried_key`,
    # honoured for that amount, so a thread paused during or after its charge never charges
    # again); one that was to run a node now gone goes on by resume_at.
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
    """Where a thread goes on when its next node is gone: its checks, or its charge (same key)."""
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
    update: dict[str, Any] = {}
    while version < target:
        step = UPGRADES[version](state) | {"flow_version": version + 1}
        # Reducer keys (lists) are appended by LangGraph: an upgrade that writes one adds to it.
        state |= step
        update |= step
        version += 1
    return update
