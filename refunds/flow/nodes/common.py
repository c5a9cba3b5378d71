"""What the nodes share."""

from __future__ import annotations

from langgraph.errors import GraphDrained
from langgraph.runtime import Runtime

from refunds import policy
from refunds.flow.state import Collaborators, OrderCheck, RefundState


def customer_namespace(email: str) -> tuple[str, ...]:
    # Store namespace labels may not contain periods.
    return ("customers", email.lower().replace(".", "%2E"))


def attempt(runtime: Runtime[Collaborators]) -> int:
    info = runtime.execution_info
    return info.node_attempt if info is not None else 1


def stop_if_drained(runtime: Runtime[Collaborators]) -> None:
    """Checked before every gateway attempt: LangGraph's retries do not look at the drain."""
    if runtime.drain_requested:
        raise GraphDrained(runtime.drain_reason or "drain requested")


def reason_of(state: RefundState) -> str:
    # A state without one was opened by order number for a late delivery (flow version 2).
    return state.get("reason") or policy.LATE_DELIVERY


def ordered_checks(state: RefundState) -> list[OrderCheck]:
    """The ticket's orders' checks, in the ticket's order."""
    checks = state.get("checks") or {}
    return [checks[n] for n in state.get("order_numbers") or list(checks) if n in checks]
