"""Graph state and the JSON payloads that cross the interrupt. No Django imports."""

from __future__ import annotations

import operator
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from datetime import date
from typing import Annotated, Any, Literal, NotRequired, Protocol, TypedDict

FLOW_VERSION = 7  # bump with a state-shape change; see refunds/flow/versions.py


class OrderFacts(TypedDict):
    number: str
    customer_name: str
    customer_email: str
    promised_on: str  # ISO dates: state is JSON, and so is the checkpoint
    delivered_on: str
    fee_cents: int
    # What the ledger already refunded for this order (other tickets), and the last such ticket.
    refunded_cents: int
    refunded_by_ticket: int | None
    # What the customer paid, when the shop sent it: never refunded beyond.
    paid_cents: NotRequired[int]
    # Refunded outside the desk (at the processor), as recorded when the order was read. Absent: 0
    outside_refunded_cents: NotRequired[int]
    # What was bought, and what other tickets hold of the fee. No lines: the fee alone.
    lines: NotRequired[list[LineFacts]]
    shipping_refunded_cents: NotRequired[int]


class LineFacts(TypedDict):
    """One line of an order, and what the ledger holds of it (other tickets)."""

    id: int  # the OrderLine's, which a Part names
    title: str
    sku: str
    unit_price_cents: int
    quantity: int
    tax_cents: int
    refunded_quantity: int
    refunded_cents: int


class CustomerHistory(TypedDict):
    refunds: int
    total_cents: int
    recent: NotRequired[int]  # of those, refunded in the last RECENT_DAYS days


class Tracking(TypedDict, total=False):
    status: Literal["found", "unavailable"]
    delivered_on: str
    error: str


class Part(TypedDict, total=False):
    """Units of a line, or the fee; a whole order is written out part by part for the ledger."""

    line: int
    quantity: int
    shipping: bool
    amount_cents: int
    restock: bool


class OrderAnswer(TypedDict, total=False):
    answer: Literal["approve", "reject"]
    amount_cents: int  # approve: what to pay, the parts' sum
    reason: str  # reject: why, for the customer; approve: why less than proposed, if said
    parts: list[Part]  # approve: what is refunded
    # approve, after a review that said the payment is disputed: not stopped again for it.
    dispute_seen: bool
    # approve: refunded once its lines come back (the thread waits for the goods first).
    on_return: bool
    # reject: nothing of it came back; the email words why (`reason` is the desk's).
    not_back: bool
    returned: bool  # approve: its lines came back (the email thanks, never asks for them)
    # approve: the customer chooses store credit or money (REFUNDS_STORE_CREDIT); `credit`:
    # paid as store credit (their choice, or the only way the policy allows).
    offer_credit: bool
    credit: bool


class ReviewAnswer(TypedDict, total=False):
    # "ask": the reviewer asks the customer (`reason` is the question); "reply": the customer's
    # answer to it (`reason` is their text), resuming the wait.
    # "received", "flagged", "no_return": the goods' wait (`orders`: what came back).
    answer: Literal[
        "approve",
        "reject",
        "ask",
        "reply",
        "no_reply",
        "received",
        "flagged",
        "no_return",
        "credit",  # the customer's choice of an offer of store credit (or the timer's "money")
        "money",
    ]
    reason: str
    reviewer: str
    decision_id: int
    # approve or reject: the answer per open order number, in its one shape (flow/answers.py).
    orders: dict[str, OrderAnswer]
    sent_back: bool  # a misread message sent back to Needs sorting: nothing told the customer


class Asking(TypedDict):
    """A question to the customer that the thread is sending or waiting on."""

    question: str
    asked_by: str
    decision_id: int  # the ask's Decision: the question email's outbox key is made from it


class Returning(TypedDict):
    """An approval on return that the thread is telling the customer about or waiting on."""

    reference: str  # on the parcel; the warehouse's "received" names it
    decision_id: int  # the approval's Decision: the return email's outbox key is made from it
    asked_by: str
    orders: dict[str, list[Part]]  # per order, the line parts to come back


class ReturnWait(TypedDict):
    """The goods' wait payload: a "received" for this reference, and no other, resumes it."""

    kind: Literal["return"]
    reference: str
    return_id: int  # the approval's Decision
    orders: dict[str, list[Part]]
    required_role: Literal["agent", "manager"]
    amount_cents: int
    order: OrderFacts
    description: str


class Offering(TypedDict):
    """An approval that offers store credit: the customer is being asked, or chose."""

    decision_id: int  # the approval's Decision: the offer email's outbox key is made from it
    orders: list[str]  # the orders offered store credit


class ChoiceWait(TypedDict):
    """The wait on the customer's choice: store credit or money ("money" when it ends)."""

    kind: Literal["choice"]
    offer_id: int  # the approval's Decision
    money_cents: int
    credit_cents: int
    required_role: Literal["agent", "manager"]
    amount_cents: int
    order: OrderFacts
    description: str


class Reply(TypedDict):
    """A question asked and the customer's reply to it, shown on every later review."""

    question: str
    asked_by: str
    reply: str
    no_reply: NotRequired[bool]  # the wait ended without one (REFUNDS_ASK_GIVE_UP_DAYS)


class CustomerWait(TypedDict):
    """The wait on the customer's payload; "closed": waiting on a reply that reopens it."""

    kind: Literal["customer", "closed"]
    question: str
    asked_by: str
    ask_id: int  # the ask's Decision: a reply to this question, and no other, resumes the wait
    required_role: Literal["agent", "manager"]  # whose queue the review comes back to
    amount_cents: int
    order: OrderFacts
    description: str


class OrderCheck(TypedDict, total=False):
    """What the per-order check found for one order; the review lists one per order."""

    number: str
    order: OrderFacts
    balance_cents: int
    amount_cents: int  # what the ticket asks for it: its balance, 0 when the policy declines
    # What the policy proposes to refund (summing to `amount_cents`), and why, in words.
    parts: list[Part]
    parts_why: str
    late_by_days: int
    refundable: bool
    declined_reason: str  # why the policy declines it, in words for the customer
    flags: list[str]
    notes: list[str]
    history: CustomerHistory
    tracking: Tracking  # only when a carrier is configured (REFUNDS_CARRIER)
    # The charge key a thread approved under flow version 4 used, honoured for that amount.
    carried_key: str
    carried_key_cents: int
    # Refunds the processor failed: in the next charge's key, so approving again refunds anew.
    refunds_failed: int
    on_return: bool  # the policy proposes refunding it once its lines come back
    # Store credit: "offer" the customer may choose it, "only" the policy pays it so; bonus %.
    credit: Literal["offer", "only"]
    credit_bonus_percent: int
    answer: OrderAnswer  # after the review


class OrderCharge(TypedDict, total=False):
    """One order's charge in the charge fan-out: its receipt, or a definite "no"."""

    number: str
    amount_cents: int
    receipt: str
    error: str
    # An open dispute (errors.PaymentDisputed): the next review's approval says a manager saw it.
    disputed: bool


class ChargeTask(TypedDict):
    """What Send hands one charge_order task: the order, the amount, its idempotency key."""

    ticket_key: str
    key: str
    number: str
    amount_cents: int
    parts: list[Part]
    dispute_seen: NotRequired[bool]  # a manager approved after reading of an open dispute
    credit_bonus_cents: NotRequired[int]  # present: paid as store credit, with this bonus


class CheckTask(TypedDict):
    ticket_key: str
    order_number: str
    reason: str
    words: NotRequired[str]  # the customer's, which the policy matches to the order's lines


def merge_by_order(left: dict[str, Any] | None, right: dict[str, Any] | None) -> dict[str, Any]:
    """Each task writes its own order's entry; a later one (a retried charge) replaces it only."""
    return {**(left or {}), **(right or {})}


# In `reading`: the intake left telling the customer to the ticket, so one its checks decide at
# once sends only the outcome, not an acknowledgment then a refusal.
TICKET_TELLS = "ticket_tells"


class RefundState(TypedDict, total=False):
    ticket_key: str  # the thread's business key, also the prefix of every idempotency key
    order_number: str  # the ticket's first (or only) order
    order_numbers: list[str]  # every order the ticket covers, first first
    checks: Annotated[dict[str, OrderCheck], merge_by_order]
    charges: Annotated[dict[str, OrderCharge], merge_by_order]
    note: str
    reason: str  # refunds.policy.REASONS
    reading: dict[str, Any] | None  # intake.reading.Reading's JSON; None: opened by number
    flow_version: int
    forks: int  # how many times an admin forked this thread; part of the notify email's key
    fork_id: int  # the Fork row applied last: a re-applied fork is noticed, not forked twice
    order: OrderFacts
    history: CustomerHistory
    tracking: Tracking  # only when a carrier is configured (REFUNDS_CARRIER)
    late_by_days: int
    balance_cents: int  # what is still refundable on the order when the ticket was checked
    amount_cents: int
    required_role: Literal["agent", "manager"]
    decision: ReviewAnswer
    receipt: str
    payment_error: str
    # An answer that could not be applied: the review comes back saying so, never a failed ticket.
    review_error: str
    email_delivered: bool
    outcome: Literal["refunded", "declined", "rejected"]
    outcome_reason: str
    asking: Asking | None  # the question being sent or waited on
    returning: Returning | None  # the goods being asked back or waited on
    offering: Offering | None  # store credit being offered, or waited on
    replies: list[Reply]
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
    reason: str  # refunds.policy.REASONS; the queue and the API show it
    reading: dict[str, Any] | None  # what the reader found, with its quotes and who read it
    orders: NotRequired[list[ReviewOrder]]  # one line per order; `amount_cents` is their total
    replies: NotRequired[list[Reply]]  # oldest first
    # Charges stopped for an open dispute: an approval of this review charges them all the same.
    disputed: NotRequired[list[str]]
    # The payment_error is a refund the processor failed after making it, not a refused charge.
    refund_failed: NotRequired[bool]


class ReviewOrder(TypedDict):
    number: str
    amount_cents: int  # 0: nothing to decide (declined by policy, or refunded already)
    fee_cents: int
    late_by_days: int
    status: Literal["open", "declined", "refunded"]
    declined_reason: str
    receipt: str
    notes: list[str]
    flags: list[str]
    # A reviewer's `parts` are checked against the order's facts (policy.parts_checked).
    order: NotRequired[OrderFacts]
    parts: NotRequired[list[Part]]
    parts_why: NotRequired[str]
    disputed: NotRequired[bool]  # its last charge stopped for an open dispute
    on_return: NotRequired[bool]  # the policy proposes refunding it once its lines come back
    credit: NotRequired[Literal["offer", "only"]]  # store credit, as OrderCheck.credit
    credit_bonus_percent: NotRequired[int]


class Payer(Protocol):
    def __call__(
        self,
        *,
        key: str,
        amount_cents: int,
        order_number: str = "",
        parts: list[Part] | None = None,
        dispute_seen: bool = False,
    ) -> str:
        """Move the money once per key; raises ChargeRefused (PaymentDisputed unless
        `dispute_seen`), RetryableGatewayError, or anything else (the run stops)."""
        ...


class Mailer(Protocol):
    def __call__(
        self, *, key: str, to: str, kind: str, facts: dict[str, Any], language: str
    ) -> None:
        """Word the kind of email in the customer's language and deliver it once per key."""
        ...


@dataclass(frozen=True)
class CreditRule:
    """Store credit instead of money: its bonus, and the reasons it is the only way."""

    bonus_percent: int = 0
    only_reasons: frozenset[str] = frozenset()


class CreditIssuer(Protocol):
    def __call__(
        self, *, key: str, amount_cents: int, bonus_cents: int, order_number: str, parts: list[Part]
    ) -> str:
        """Issue store credit worth `amount_cents` of the order's balance (plus a bonus) once
        per key; raises as Payer does."""
        ...


@dataclass(frozen=True)
class ReturnRule:
    """When the review proposes a refund on return (REFUNDS_RETURN_*): for these reasons, from
    this much, or for a customer with this many refunds in the last RECENT_DAYS days."""

    reasons: frozenset[str] = frozenset()
    from_cents: int | None = None
    after_recent_refunds: int | None = None


@dataclass
class Collaborators:
    """Everything a node touches outside its state; `pay` and `send_mail` are bound to the run's
    lease epoch, so every effect is fenced."""

    find_order: Callable[[str], OrderFacts | None]
    pay: Payer
    send_mail: Mailer
    # Passed in by the runner: the graph stays Django-free (refunds/policy.py reads the setting).
    agent_limit_cents: int
    # A gateway that is down is retried this long before a manager hears no money moved.
    charge_retry_seconds: float
    today: Callable[[], date] = field(default=date.today)  # a function: tests move the clock
    # Async, so a node timeout cuts it off; None: no carrier.
    track: Callable[[str], Awaitable[Tracking]] | None = None
    # REFUNDS_ASK_DEFAULT_OUTCOME: "queue" brings the review back, "close" closes until a reply.
    ask_default_outcome: Literal["queue", "close"] = "queue"
    # Refunds on return: where the goods go, how long the thread waits, and what nothing
    # received by then does ("reject" the parts that did not come, or "queue" for a manager).
    return_rule: ReturnRule = field(default_factory=ReturnRule)
    return_address: str = ""
    return_days: int = 21
    return_default_outcome: Literal["reject", "queue"] = "reject"
    # Store credit (REFUNDS_STORE_CREDIT): None where the shop does not offer it.
    store_credit: CreditRule | None = None
    credit: CreditIssuer | None = None  # issues it once per key, bound to the lease as `pay`
    credit_days: int = 14
