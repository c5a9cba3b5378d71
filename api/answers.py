"""What the API answers, as Pydantic models read from the rows; /api/schema/ is drawn from them."""

from __future__ import annotations

from datetime import datetime
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field

from intake.models import Message
from refunds import policy
from refunds.models import Decision, Ticket
from refunds.selectors import REFUND_STATES, RETURN_STATES, refund_progress
from refunds.statuses import (
    ChargeStatus,
    DecisionAnswer,
    EmailStatus,
    ProcessorStatus,
    TicketStatus,
)


class Out(BaseModel):
    model_config = ConfigDict(from_attributes=True)


class TicketRef(Out):
    id: int
    thread_id: str
    status: TicketStatus
    url: str


def ticket_ref(ticket: Ticket, request: Any) -> dict[str, Any]:
    url = request.build_absolute_uri(f"/api/tickets/{ticket.pk}/")
    return TicketRef.model_validate({**vars(ticket), "url": url}).model_dump(mode="json")


class ReviewOrderOut(Out):
    """One order of a ticket of several, as its review lists it (its parts and order too)."""

    model_config = ConfigDict(extra="allow")

    number: str
    amount_cents: int = Field(
        description="What the review asks for it; 0 when there is nothing to decide."
    )
    fee_cents: int
    late_by_days: int
    status: Literal["open", "declined", "refunded"] = Field(
        description="open: answer it; declined: by policy (declined_reason); refunded: already "
        "(receipt)."
    )
    declined_reason: str
    receipt: str
    notes: list[str]
    flags: list[str]


class PendingReview(Out):
    interrupt_id: str
    payload: dict[str, Any] = Field(description="LangChain Agent Inbox shape: action_request, ...")
    orders: list[ReviewOrderOut] | None = Field(
        description="A ticket of several orders: one line per order (payload.orders); answer the "
        "open ones in the decision's `orders`. null for a ticket of one order."
    )


class DecisionOut(Out):
    interrupt_id: str
    answer: DecisionAnswer
    reason: str
    orders: dict[str, Any] | None
    reviewer: str | None = Field(
        description="Who answered, when a reviewer did; null for the customer's reply and the "
        "wait's timer (see `answered_by`)."
    )
    answered_by: Literal["reviewer", "customer", "timer"] = Field(
        description="reviewer (approve, reject, ask), customer (their reply) or timer (no reply "
        "came)."
    )
    decided_at: datetime
    applied: bool


class ChargeOut(Out):
    receipt: str | None
    amount_cents: int
    status: ChargeStatus
    processor_status: ProcessorStatus
    created_at: datetime


class EmailOut(Out):
    to: str
    subject: str
    status: EmailStatus
    sent_at: datetime | None


def _role_help(schema: dict[str, Any]) -> None:
    schema["description"] = policy.role_help()  # the agent limit in force when it is drawn


class TicketOut(Out):
    id: int
    thread_id: str
    order_number: str = Field(description="Its first order.")
    order_numbers: list[str] = Field(
        description="Every order the ticket covers, its first order first."
    )
    note: str
    status: TicketStatus
    required_role: Literal["agent", "manager"] | None = Field(json_schema_extra=_role_help)
    amount_cents: int | None
    nodes_run: list[str]
    outcome_reason: str
    last_error: str
    pending_review: PendingReview | None
    decision: DecisionOut | None
    refund_state: str | None = Field(
        json_schema_extra={"enum": [*REFUND_STATES, None]},
        description="Where a refunded ticket's money is, by what the processor said last: "
        '"on_its_way" (started, not at the customer\'s bank yet), "refunded" (the processor '
        'said it succeeded, or a gateway that reports nothing), "failed"; null unless the '
        "ticket is refunded.",
    )
    refund_words: str | None = Field(
        description="The same in the desk's words: \"Refund of $6.99 started, on its way to the "
        'customer\'s bank", "Refunded", or the failure and what it means for the money.'
    )
    charges: list[ChargeOut]
    emails: list[EmailOut]
    created_at: datetime
    updated_at: datetime


def _decision_out(decision: Decision) -> DecisionOut:
    by: dict[str, str] = {Decision.Answer.REPLY: "customer", Decision.Answer.NO_REPLY: "timer"}
    return DecisionOut.model_validate(
        {
            **vars(decision),
            "reviewer": decision.reviewer.username if decision.reviewer else None,
            "answered_by": by.get(decision.answer, "reviewer"),
            "applied": decision.applied_at is not None,
        }
    )


def ticket_out(ticket: Ticket) -> dict[str, Any]:
    payload = ticket.pending_payload
    pending = None
    if ticket.status == Ticket.Status.AWAITING_REVIEW:
        orders = payload.get("orders") if isinstance(payload, dict) else None
        pending = {
            "interrupt_id": ticket.pending_interrupt_id,
            "payload": payload or {},
            "orders": orders,
        }
    decisions = sorted(ticket.decisions.all(), key=lambda d: d.decided_at)
    progress: dict[str, Any] = dict(refund_progress(ticket) or {})
    return TicketOut.model_validate(
        {
            **vars(ticket),
            "order_number": ticket.order.number,
            "order_numbers": ticket.order_numbers(),
            "required_role": ticket.required_role or None,
            "pending_review": pending,
            "decision": _decision_out(decisions[-1]) if decisions else None,
            "refund_state": progress.get("state"),
            "refund_words": progress.get("words"),
            "charges": list(ticket.charges.all()),
            "emails": list(ticket.emails.all()),
        }
    ).model_dump(mode="json")


class TicketPage(Out):
    """One page of the ticket list."""

    count: int = Field(description="Tickets matching, on every page.")
    next: str | None = Field(description="The next page, or null on the last.")
    previous: str | None = Field(description="The previous page, or null on the first.")
    results: list[TicketOut]


class Error(Out):
    """The one error shape, for every status."""

    status: int
    code: str
    error: str = Field(description="What went wrong, in words for a person.")
    fields: dict[str, list[str]] | None = Field(
        None, description="On 400: the messages of each bad field, by its path (orders.1042.parts)."
    )
    ticket: TicketRef | None = Field(None, description="On 409: the order's open ticket.")
    order_number: str | None = Field(
        None, description="On 409: the order asked for that the open ticket covers."
    )


class DecisionMade(Out):
    """The decision recorded, in its one shape (`orders`: each open order's answer, an approval
    with the parts it refunds and their `amount_cents`): a worker applies it."""

    id: int
    interrupt_id: str
    answer: DecisionAnswer
    reason: str
    orders: dict[str, Any] | None
    reviewer: str
    decided_at: datetime


class MessageOut(Out):
    id: int
    status: Message.Status = Field(description="received until the intake has read and placed it.")
    received_at: datetime
    ticket: int | None = Field(description="The ticket it opened or was added to.")


class OrderResult(Out):
    line: int = Field(description="The order's place in the request's list, from 1.")
    order_number: str
    result: Literal["created", "updated", "unchanged", "refused"]
    reason: str = Field(description="Why it was refused.")
    field: str = Field(
        description="The value refused within the order: its path, such as `shipping_fee` or "
        "`lines[1].quantity` (lines counted from 0); empty when the order is refused as a "
        "whole (its number twice, money refunded, an open ticket) or not refused."
    )


class OrdersPushed(Out):
    created: int
    updated: int
    unchanged: int
    refused: int
    results: list[OrderResult]


class ReturnArrived(Out):
    """What became of the warehouse's word."""

    ticket: int
    reference: str
    outcome: Literal["recorded", "kept", "already"] = Field(
        description="recorded: the ticket goes on (refunds what came back, or a manager decides "
        "a flagged return again); kept: the ticket is still applying its approval, the word is "
        "applied once it waits for the goods; already: the same word came before, nothing "
        "changed."
    )


class ReturnLineOut(Out):
    order: str
    line: int = Field(description="The order line's id: name it in lines[].line.")
    sku: str
    title: str
    quantity: int = Field(description="Units asked back.")
    came_back: int | None = Field(description="Units the warehouse said came back; null until.")


class ReturnOut(Out):
    """A return: the goods an approval on return waits for, and what the warehouse said."""

    reference: str
    ticket: int
    status: str = Field(
        json_schema_extra={"enum": list(RETURN_STATES)},
        description="waiting for the goods; kept: a word came before the ticket waited, applied "
        "once it does; received, flagged, or no_return (nothing came back in time).",
    )
    asked_at: datetime
    arrived_at: datetime | None
    reason: str = Field(description="flagged: why.")
    lines: list[ReturnLineOut]
