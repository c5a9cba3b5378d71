"""Reads that pages and the API share."""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass
from datetime import datetime
from typing import TypedDict

from django.db import connection
from django.db.models import Max, Q, Value
from django.db.models.expressions import RawSQL
from django.db.models.functions import Upper
from django.utils import timezone

from core.clock import day_words, local_words
from refunds import outbox
from refunds.flow.errors import DISPUTED
from refunds.flow.words import dollars
from refunds.models import (
    AuditEvent,
    Charge,
    ChargePart,
    Decision,
    Email,
    Order,
    OrderLine,
    OutsideRefund,
    PaymentDispute,
    ReturnRequest,
    Ticket,
    TicketOrder,
    of_customer,
)
from refunds.services.returns import Arrival
from refunds.statuses import PROCESSOR_GAVE_BACK, PROCESSOR_ON_ITS_WAY

EARLIER_LIMIT = 10


def queue_clock() -> int:
    """The desk's change clock: the highest card version (migration 0047's triggers move it in
    every transaction that changes what a queue card shows). One read of one index."""
    return Ticket.objects.aggregate(clock=Max("card_version"))["clock"] or 0


def review_outcome(ticket: Ticket, interrupt_id: str, *, now: datetime) -> str | None:
    """How the review ended, for one who lost the claim race; None while a colleague has it."""
    number = ticket.order.number
    decided = Decision.objects.filter(ticket=ticket, interrupt_id=interrupt_id)
    decision = decided.select_related("reviewer").first() if interrupt_id else None
    if decision is not None:
        approved = [o for o in (decision.orders or {}).values() if o["answer"] == "approve"]
        if decision.answer == Decision.Answer.ASK:
            done = "the customer was asked"
        elif not approved:
            done = "rejected"
        else:
            done = f"approved: {dollars(sum(o['amount_cents'] for o in approved))}"
        when = local_words(decision.decided_at)
        if decision.reviewer is None:  # the wait on the customer: their reply, or the timer's
            said = "no reply came" if decision.answer == Decision.Answer.NO_REPLY else "replied"
            return f"Order {number}: the customer was asked, and {said} at {when}."
        return f"Order {number} was decided by {decision.reviewer.username} at {when}, {done}."
    if (
        ticket.status != Ticket.Status.AWAITING_REVIEW
        or ticket.pending_interrupt_id != interrupt_id
    ):
        return (
            f"Order {number} is no longer waiting on this review ({ticket.get_status_display()})."
        )
    if ticket.is_escalated:
        return f"Order {number} was escalated to managers."
    if ticket.claim_holder(now) is None:
        return f"Order {number} is free again: it is back in the queue."
    return None


class RefundProgress(TypedDict):
    """Where a refunded ticket's money is: `state` for code and CSS, `words` for people."""

    state: str  # "on_its_way" | "refunded" | "failed" (REFUND_STATES)
    words: str


REFUND_STATES = ("on_its_way", "refunded", "failed")


def refund_progress(ticket: Ticket) -> RefundProgress | None:
    """Where a refunded ticket's money is, in the desk's words; None unless it is refunded."""
    return refund_progress_of([ticket]).get(ticket.pk)


def refund_progress_of(tickets: Iterable[Ticket]) -> dict[int, RefundProgress]:
    """refund_progress for each refunded ticket of a list, by ticket id, in one query."""
    refunded = [t.pk for t in tickets if t.status == Ticket.Status.REFUNDED]
    charges: dict[int, list[Charge]] = {pk: [] for pk in refunded}
    for charge in Charge.objects.filter(ticket_id__in=refunded, status=Charge.Status.SUCCEEDED):
        charges[charge.ticket_id].append(charge)
    return {pk: _progress(found) for pk, found in charges.items()}


def charge_progress(charge: Charge) -> RefundProgress:
    """Where one paid refund's money is, in the same words (the ticket page's list of them)."""
    progress = _progress([charge])
    if progress["state"] == "failed":
        # Why it failed is the review's line it went back to (and the audit's note): said there.
        words = f"Refund of {dollars(charge.amount_cents)} failed; the money came back"
        return {"state": "failed", "words": words}
    return progress


def _progress(charges: Iterable[Charge]) -> RefundProgress:
    """ "Refunded" is the processor's word (or it never said); until it finishes, on its way."""
    paid = [c for c in charges if c.status == Charge.Status.SUCCEEDED]
    gave_back = [c for c in paid if c.processor_status in PROCESSOR_GAVE_BACK]
    standing = [c for c in paid if c.processor_status not in PROCESSOR_GAVE_BACK]
    # A failure handed back to a manager was dealt with there; alone it still failed.
    failed = [c for c in gave_back if c.handed_back_at is None] or (
        gave_back if not standing else []
    )
    if failed:
        why = dict.fromkeys(
            refund_failure_words(c.failure_reason, c.processor_status) for c in failed
        )
        amount = dollars(sum(c.amount_cents for c in failed))
        return {"state": "failed", "words": f"Refund of {amount} failed. {' '.join(why)}"}
    if any(c.processor_status in PROCESSOR_ON_ITS_WAY for c in standing):
        amount = dollars(sum(c.amount_cents for c in standing))
        words = f"Refund of {amount} started, on its way to the customer's bank"
        return {"state": "on_its_way", "words": words}
    return {"state": "refunded", "words": Ticket.Status.REFUNDED.label}


# Stripe's Refund.failure_reason, in the desk's words (what the card or bank did).
_FAILURE_WORDS = {
    "expired_or_canceled_card": "The customer's bank refused the refund: the card is closed.",
    "lost_or_stolen_card": (
        "The customer's bank refused the refund: the card was reported lost or stolen."
    ),
    "declined": "The customer's bank refused the refund.",
    "charge_for_pending_refund_disputed": ("Stripe stopped the refund: the payment is disputed."),
    "insufficient_funds": "Stripe stopped the refund: the shop's Stripe balance was too low.",
    "merchant_request": "The refund was canceled at Stripe.",
}


def refund_failure_words(reason: str, status: str = "failed") -> str:
    """Why an accepted refund did not reach the customer, in the desk's words."""
    if reason in _FAILURE_WORDS:
        why = _FAILURE_WORDS[reason]
    elif status == "canceled":
        why = "The refund was canceled at Stripe."
    else:
        why = "The refund failed at Stripe" + (f" ({reason})." if reason else ".")
    return f"{why} No money reached them."


def resendable_email_ids(ticket: Ticket) -> set[int]:
    """The ticket's undelivered emails an admin may send again (refunds.outbox.resendable)."""
    emails = ticket.emails.filter(outbox.resendable()).exclude(status=Email.Status.SENT)
    return set(emails.values_list("pk", flat=True))


def earlier_tickets(ticket: Ticket) -> dict[str, list[Ticket]]:
    """Other tickets of the order and of the customer, newest first, to check before refunding."""
    others = Ticket.objects.exclude(pk=ticket.pk).select_related("order").order_by("-id")
    return {
        "order": list(others.filter(order_id=ticket.order_id)[:EARLIER_LIMIT]),
        "customer": list(
            of_customer(others, ticket.order.customer_email, field="order__customer_email").exclude(
                order_id=ticket.order_id
            )[:EARLIER_LIMIT]
        ),
    }


def _name_contains(part: str):
    """Tickets whose first order's customer name holds `part`, by a trigram index."""
    if connection.vendor != "sqlite" or len(part) < 3:
        return Q(order__customer_name__icontains=part)
    phrase = '"' + part.replace('"', '""') + '"'  # one phrase: the part as written
    return Q(
        order_id__in=RawSQL(
            "SELECT rowid FROM refunds_order_name WHERE refunds_order_name MATCH %s", [phrase]
        )
    )


def ticket_search(
    tickets,
    *,
    user,
    q: str = "",
    status: str = "",
    role: str = "",
    opened_after=None,
    opened_before=None,
    min_cents: int | None = None,
    max_cents: int | None = None,
    mine: bool = False,
    decided: bool = False,
    order_by: tuple[str, ...] = ("-id",),
):
    """The user's visible `tickets` matching the tickets page's search and filters."""
    q = (q or "").strip()
    tickets = _matching(tickets, q) if q else tickets
    if role == "escalated":
        tickets = tickets.escalated()
    if decided:
        tickets = tickets.filter(pk__in=Decision.objects.filter(reviewer=user).values("ticket_id"))
    filters = {
        "status": status or None,
        "required_role": role if role != "escalated" and role else None,
        "created_at__gte": opened_after,
        "created_at__lt": opened_before,
        "amount_cents__gte": min_cents,
        "amount_cents__lte": max_cents,
        "opened_by": user if mine else None,
    }
    return tickets.filter(**{k: v for k, v in filters.items() if v is not None}).order_by(*order_by)


def _matching(tickets, q: str):
    """A ticket id or order number, a customer's email, or part of their name."""

    def covering(orders: Q) -> Q:  # any order the ticket covers, not only its first
        return Q(pk__in=TicketOrder.objects.filter(orders).values("ticket_id"))

    number = q.lstrip("#")
    if number.isdigit():
        return tickets.filter(
            covering(Q(order__number=number)) | (Q(pk=int(number)) if len(number) <= 18 else Q())
        )
    if "@" in q:
        return of_customer(tickets, q, field="order__customer_email")
    upper_number = Order.objects.alias(upper=Upper("number")).filter(upper=Upper(Value(q)))
    if upper_number.exists():  # an order number like "P00042", in any case
        return tickets.filter(covering(Q(order__number__in=upper_number.values("number"))))
    return tickets.filter(_name_contains(q))  # through the name index (refunds/migrations/0023)


def audit_events(
    *, action: str = "", actor: str = "", ticket: int | None = None, since=None, until=None
):
    """The audit trail, newest first, filtered as the audit page asks."""
    filters = {
        "action": action,
        "actor__username": actor,
        "ticket_id": ticket,
        "at__date__gte": since,
        "at__date__lte": until,
    }
    events = AuditEvent.objects.select_related("actor", "ticket__order").order_by("-at", "-id")
    return events.filter(**{k: v for k, v in filters.items() if v})


@dataclass(frozen=True)
class LineBought:
    """One line of an order as the desk shows it: bought, refunded, left."""

    line: OrderLine
    refunded_quantity: int
    refunded_cents: int

    @property
    def left_quantity(self) -> int:
        return self.line.quantity - self.refunded_quantity

    @property
    def left_cents(self) -> int:
        return self.line.amount_cents - self.refunded_cents


def refunded_by_line(line_ids: Iterable[int]) -> dict[int, tuple[int, int]]:
    """(quantity, minor units) the ledger holds of each line by id, as refunds/money.py counts."""
    ids = set(line_ids)
    held = Charge.objects.holding_balance().filter(parts__line_id__in=ids).held_per_line()
    return {line: counted for line, counted in held.items() if line in ids}


def orders_bought(order_ids: Iterable[int]) -> dict[int, list[LineBought]]:
    """The lines of each order with what was refunded of each; orders without lines left out."""
    lines = list(OrderLine.objects.filter(order_id__in=list(order_ids)).order_by("order_id", "id"))
    refunded = refunded_by_line(line.pk for line in lines)
    bought: dict[int, list[LineBought]] = {}
    for line in lines:
        quantity, cents = refunded.get(line.pk, (0, 0))
        bought.setdefault(line.order_id, []).append(LineBought(line, quantity, cents))
    return bought


def outside_refunds_words(order_ids: Iterable[int]) -> list[tuple[OutsideRefund, str]]:
    """These orders' refunds made outside the desk, oldest first, with the ticket page's words."""
    rows = OutsideRefund.objects.filter(order_id__in=list(order_ids)).select_related("order")
    said = []
    for row in rows.order_by("made_at", "id"):
        words = f"{dollars(row.amount_cents)} refunded outside the desk"
        if row.made_at:
            words += f" on {day_words(timezone.localdate(row.made_at))}"
        if row.status in PROCESSOR_GAVE_BACK:
            status = row.get_status_display().lower()
            words += f", then {status} at the processor: it does not count"
        said.append((row, words + "."))
    return said


def disputes_words(order_ids: Iterable[int]) -> list[tuple[PaymentDispute, str]]:
    """The disputes of these orders' payments, oldest first, with the ticket page's words."""
    rows = PaymentDispute.objects.filter(order_id__in=list(order_ids)).select_related("order")
    said = []
    for row in rows.order_by("opened_at", "id"):
        what = f"{dollars(row.amount_cents)} of the payment" if row.amount_cents else "The payment"
        when = f" on {day_words(timezone.localdate(row.opened_at))}" if row.opened_at else ""
        words = f"{what} disputed by the customer's bank{when}"
        closed = f"{words}; closed ({row.status})."
        said.append((row, f"{words}. {DISPUTED}" if row.is_open else closed))
    return said


def line_titles(line_ids: Iterable[int]) -> dict[int, str]:
    """The title of each order line, by its id."""
    return dict(OrderLine.objects.filter(pk__in=list(line_ids)).values_list("pk", "title"))


def refunds_given(ticket: Ticket) -> list[dict]:
    """What a ticket's standing refunds gave back, order by order and part by part, for webhooks."""
    charges = (
        ticket.charges.holding_balance()
        .filter(status=Charge.Status.SUCCEEDED)
        .select_related("order")
        .prefetch_related("parts__line")
        .order_by("id")
    )
    return [
        {
            "order_number": charge.order.number,
            "amount_cents": charge.amount_cents,
            "receipt": charge.receipt,
            "parts": [_given(part) for part in sorted(charge.parts.all(), key=lambda p: p.pk)],
        }
        for charge in charges
    ]


def _given(part: ChargePart) -> dict:
    if part.line is None:
        return {"shipping": True, "amount_cents": part.amount_cents}
    return {
        "line_id": part.line.line_id,
        "sku": part.line.sku,
        "title": part.line.title,
        "quantity": part.quantity,
        "amount_cents": part.amount_cents,
        "restock": part.restock,
    }


# --- returns: what the API, the returns page and the ticket page show of one ---------------------
RETURN_STATES = ("waiting", "kept", "received", "flagged", "no_return")


@dataclass(frozen=True)
class LineAsked:
    """One line a return asks back, and how many units of it the warehouse said came back."""

    order: str
    line: int
    sku: str
    title: str
    quantity: int  # asked back
    came_back: int | None  # None until the return is received


def return_state(found: ReturnRequest) -> str:
    """Where a return stands (RETURN_STATES): waiting for the goods, a word kept until the
    thread waits for it, or the word recorded."""
    if found.arrived:
        return str(found.arrived.get("answer") or "")
    return "kept" if found.early else "waiting"


def return_lines(found: ReturnRequest) -> list[LineAsked]:
    """The lines a return asks back, order by order, with what its "received" counted."""
    ids = [p["line"] for parts in found.orders.values() for p in parts]
    rows = {row.pk: row for row in OrderLine.objects.filter(pk__in=ids).only("title", "sku")}
    said = found.arrived or {}
    received = said.get("answer") == Decision.Answer.RECEIVED
    units = said.get("orders")  # None: everything asked back came back
    lines = []
    for number, parts in found.orders.items():
        for part in parts:
            row = rows.get(part["line"])
            came = None
            if received:
                came = (
                    part["quantity"]
                    if units is None
                    else int((units.get(number) or {}).get(str(part["line"]), 0))
                )
            lines.append(
                LineAsked(
                    order=number,
                    line=part["line"],
                    sku=row.sku if row else "",
                    title=row.title if row else "",
                    quantity=part["quantity"],
                    came_back=came,
                )
            )
    return lines


def return_waited(ticket: Ticket) -> ReturnRequest | None:
    """The return a ticket waiting for goods waits for (its payload names the approval)."""
    payload = ticket.pending_payload if isinstance(ticket.pending_payload, dict) else {}
    if ticket.status != Ticket.Status.AWAITING_RETURN or not payload.get("return_id"):
        return None
    return ReturnRequest.objects.filter(ticket=ticket, decision_id=payload["return_id"]).first()


def arrival_words(arrival: Arrival, status: str) -> str:
    """What became of a word on a return's goods, as the returns page and demo_return say it."""
    ref, ticket = arrival.reference, arrival.ticket_id
    if arrival.outcome == "already":
        return f"Return {ref} was recorded as {status} already; nothing changed."
    if arrival.outcome == "kept":
        return (
            f"Return {ref}: {status}, kept. Ticket {ticket} is still applying its approval; "
            "the word is applied once it waits for the goods."
        )
    if status == Decision.Answer.FLAGGED:
        return f"Return {ref} flagged: ticket {ticket} goes back to a manager with the reason."
    return f"Return {ref} received: ticket {ticket} refunds what came back."
