"""Graph state and the JSON payloads that cross the interrupt. No Django imports."""

from __future__ import annotations

import operator
from dataclasses import dataclass, field
from typing import Annotated, Any, Literal, Protocol, TypedDict

FLOW_VERSION = 1
AGENT_LIMIT_CENTS = 2000  # support agents approve refunds up to $20.00; above goes to managers


class OrderFacts(TypedDict):
    number: str
    customer_name: str
    customer_email: str
    promised_on: str  # ISO dates: state is JSON, and so is the checkpoint
    delivered_on: str
    fee_cents: int


class CustomerHistory(TypedDict):
    refunds: int
    total_cents: int


class ReviewAnswer(TypedDict, total=False):
    answer: Literal["approve", "reject"]
    reason: str
    reviewer: str
    decision_id: int


class RefundState(TypedDict, total=False):
    ticket_key: str  # the thread's business key, also the prefix of every idempotency key
    order_number: str
    note: str
    flow_version: int
    forks: int  # how many times an admin forked this thread; part of the notify email's key
    fork_id: int  # the Fork row applied last: a re-applied fork is noticed, not forked twice
    order: OrderFacts
    history: CustomerHistory
    late_by_days: int
    amount_cents: int
    required_role: Literal["agent", "manager"]
    decision: ReviewAnswer
    receipt: str
    payment_error: str
    outcome: Literal["refunded", "declined", "rejected"]
    outcome_reason: str
    # Written by parallel branches, so each has a reducer.
    flags: Annotated[list[str], operator.add]
    notes: Annotated[list[str], operator.add]
    trail: Annotated[list[str], operator.add]


class ActionRequest(TypedDict):
    action: str
    args: dict[str, Any]


class HumanInterruptConfig(TypedDict):
    allow_accept: bool
    allow_edit: bool
    allow_respond: bool
    allow_ignore: bool


class ReviewRequest(TypedDict):
    """The interrupt payload: LangChain Agent Inbox shape plus what the queue needs."""

    action_request: ActionRequest
    config: HumanInterruptConfig
    description: str
    required_role: Literal["agent", "manager"]
    amount_cents: int
    order: OrderFacts
    late_by_days: int
    flags: list[str]
    notes: list[str]
    history: CustomerHistory
    payment_error: str


class Gateway(Protocol):
    def charge(self, *, idempotency_key: str, amount_cents: int, ticket_key: str) -> str:
        """Charge once per key; a repeated key returns the first receipt."""
        ...


class Mailer(Protocol):
    def __call__(self, *, key: str, ticket_key: str, to: str, subject: str, body: str) -> None:
        """Send the message once per key."""
        ...


def _no_fault(ticket_key: str, point: str) -> None:
    return None


def _always_owner() -> bool:
    return True


@dataclass
class Collaborators:
    """The runtime context: everything a node touches outside its state."""

    find_order: Any  # Callable[[str], OrderFacts | None]
    gateway: Gateway
    mailer: Mailer
    crash_point: Any = field(default=_no_fault)  # Callable[[str, str], None]
    still_owner: Any = field(default=_always_owner)  # Callable[[], bool]


class LeaseLost(RuntimeError):
    """Another worker took this thread's lease; stop before moving money."""


class OrderNotFound(LookupError):
    pass
