"""The intake's four @tasks, each idempotent by the message, its effects under its lease epoch."""

from __future__ import annotations

import logging
from dataclasses import dataclass
from datetime import timedelta
from typing import Any, TypedDict

from django.conf import settings
from django.db import transaction
from django.db.models.functions import Now
from django.utils import timezone
from langgraph.errors import GraphDrained
from langgraph.runtime import get_runtime

from core.clock import day_words
from intake import placing, reader
from intake.models import Message
from intake.reading import Reading, sureness
from intake.services import message_problems
from refunds import audit, mail, policy, selectors, services
from refunds import lease as leases
from refunds.flow.state import TICKET_TELLS
from refunds.models import (
    AuditEvent,
    Order,
    Ticket,
    of_customer,
    order_number_read,
    same_customer,
)
from refunds.services import NOTE_MAX

log = logging.getLogger(__name__)

TABLE = Message._meta.db_table


class Item(TypedDict):
    """What every task gets first: the message, and its thread (crash points key on it)."""

    message_id: int
    thread_id: str


@dataclass(frozen=True)
class IntakeContext:
    lease: leases.Lease


def current_lease() -> leases.Lease:
    return get_runtime(IntakeContext).context.lease


def _message(item: Item) -> Message:
    return Message.objects.get(pk=item["message_id"])


def _fenced(item: Item, lease: leases.Lease):
    return Message.objects.filter(pk=item["message_id"], lease_epoch=lease.epoch)


def _lost(lease: leases.Lease) -> GraphDrained:
    return GraphDrained(f"lease epoch {lease.epoch} of message {lease.row_id} lost")


def read_message(item: Item) -> dict[str, Any]:
    """{"reading": Reading JSON} or {"error": why the reader failed}."""
    lease = current_lease()
    message = _message(item)
    try:
        reading = reader.read(sender=message.sender, subject=message.subject, body=message.body)
    except Exception as exc:  # noqa: BLE001 - a reader that fails sends the message to a person
        log.exception("message %s: the reader failed", message.pk)
        return {"error": f"The reader failed ({type(exc).__name__}: {exc})."[:500]}
    lease.check()
    if not _fenced(item, lease).update(reading=reading.as_json()):
        raise _lost(lease)
    return {"reading": reading.as_json()}


def find_orders(item: Item, read: dict[str, Any]) -> dict[str, Any]:
    """{"orders": [numbers]} of the sender's own orders, or {"sorting": why not}."""
    message = _message(item)
    if message.sorting_reason:  # a fault found when it came in (intake/services.py)
        return {"sorting": message.sorting_reason}
    if "reading" not in read:
        return {"sorting": read.get("error") or "The reader could not read the message."}
    reading = Reading.from_json(read["reading"])
    if reading.confidence < settings.REFUNDS_READER_MIN_CONFIDENCE:
        # A review opened or a status answered on a guess costs more than a message sorted by
        # hand.
        return {"sorting": unsure_words(reading)}
    if reading.reason == policy.NOT_REFUND:
        return {"sorting": f"Not about a refund (read by {reading.read_by})."}
    if reading.reason == policy.REFUND_STATUS:
        return _asked_after(message, reading)
    try:
        numbers = list(dict.fromkeys(order_number_read(n) for n in reading.orders if n.strip("# ")))
    except ValueError as exc:
        return {"sorting": f"The reader found an order number that is not one: {exc}"}
    if not numbers:
        return _recent_order(message)
    return _senders_orders(message, numbers)


def _senders_orders(message: Message, numbers: list[str]) -> dict[str, Any]:
    """{"orders": numbers} when each is the sender's order; else {"sorting": why not}."""
    # ShopUnavailable is raised on: worth another try, the sweep brings the message back.
    found = {number: services.order_find(order_number=number) for number in numbers}
    missing = [n for n, o in found.items() if o is None]
    foreign = [
        n for n, o in found.items() if o and not same_customer(o.customer_email, message.sender)
    ]
    if foreign:
        return {
            "sorting": f"Order {', '.join(foreign)} belongs to another customer, not to "
            f"{message.sender}; nothing was opened for it."
        }
    if missing:
        return {"sorting": f"There is no order {', '.join(missing)}, in the desk or in the shop."}
    return {"orders": numbers}


def _asked_after(message: Message, reading: Reading) -> dict[str, Any]:
    """{"status_of": the sender's ticket of an order named, else their latest}, or {"sorting"}."""
    theirs = of_customer(Ticket.objects.all(), message.sender, field="order__customer_email")
    named = [n.strip("# ") for n in reading.orders if n.strip("# ")]
    ticket = (
        theirs.filter(order__number__in=named).order_by("-pk").first() if named else None
    ) or theirs.order_by("-pk").first()
    if ticket is None:
        return {
            "sorting": f"Asks where a refund is, but {message.sender} has no ticket in the desk."
        }
    return {"status_of": ticket.pk}


def unsure_words(reading: Reading) -> str:
    """Why a reading was not acted on, for the message's page and "Needs sorting"."""
    why = "; ".join(reading.unsure) or "no reason given"
    return (
        f"The reader was unsure (confidence {sureness(reading.confidence)}, below "
        f"{sureness(settings.REFUNDS_READER_MIN_CONFIDENCE)}; read by {reading.read_by}): {why}. "
        f"It read {policy.REASONS[reading.reason].lower()}"
        + (f", order {', '.join(reading.orders)}" if reading.orders else "")
        + "."
    )[:2000]


def _recent_order(message: Message) -> dict[str, Any]:
    days = settings.INTAKE_RECENT_ORDER_DAYS
    since = timezone.localdate() - timedelta(days=days)
    recent = list(
        of_customer(Order.objects.filter(promised_on__gte=since), message.sender)
        .order_by("-promised_on")
        .values_list("number", flat=True)[:5]
    )
    if len(recent) == 1:
        return {"orders": recent}
    if not recent:
        return {
            "sorting": f"No order number in the message, and {message.sender} has no order "
            f"in the desk from the last {days} days."
        }
    return {
        "sorting": f"No order number in the message, and {message.sender} has several orders "
        f"from the last {days} days ({', '.join(recent)}): which one?"
    }


def open_ticket(item: Item, read: dict[str, Any], found: dict[str, Any]) -> dict[str, Any]:
    """Place the message, in one transaction that first locks its row under our epoch: a paused
    worker that wakes after a takeover finds the epoch gone and changes nothing."""
    lease = current_lease()
    lease.check()
    with transaction.atomic():
        if not _fenced(item, lease).update(updated_at=Now()):
            raise _lost(lease)
        message = _message(item)
        if message.status == Message.Status.RECEIVED:  # else placed before a crash: not again
            _place(message, read, found)
        return placed(_message(item))


def _place(message: Message, read: dict[str, Any], found: dict[str, Any]) -> None:
    if "sorting" in found:
        _to_sorting(message, found["sorting"])
    elif "status_of" in found:  # answered with the ticket's status, nothing opened
        Message.objects.filter(pk=message.pk).update(
            status=Message.Status.ANSWERED, ticket_id=found["status_of"]
        )
    else:
        try:
            with transaction.atomic():  # all of the message's orders, or none
                reading = Reading.from_json(read["reading"])
                _open_together(message, reading, found["orders"])
        except services.RefundError as exc:
            _to_sorting(message, f"The ticket could not be opened: {exc}")


def _open_together(message: Message, reading: Reading, numbers: list[str]) -> placing.Placed:
    """Open or add to tickets for the message's orders; each ticket's audit entry says so."""
    words = f"Customer's {message.get_channel_display().lower()} message {message.pk}"
    where = placing.open_or_add(
        numbers,
        # The customer's own words: the review and the ticket page quote the note as theirs.
        note=(" ".join(message.body.split()) or message.subject or reading.summary)[:NOTE_MAX],
        # Four-eyes: who pasted or posted the message opened its ticket; the intake only acts.
        opened_by=message.brought_by,
        actor=None,
        reason=reading.reason,
        # The ticket tells the customer itself (refunds/flow/nodes/messages.received).
        reading=reading.as_json() | {TICKET_TELLS: True},
    )
    for ticket, orders in where.added:
        audit.record(
            ticket,
            AuditEvent.Action.NOTE,
            note=f"{words} added to this ticket (from {message.sender}): {message.body}"[:NOTE_MAX],
            seen={"message_id": message.pk, "added": True, "orders": orders},
        )
    if where.opened is not None:
        audit.record(
            where.opened,
            AuditEvent.Action.NOTE,
            note=f"Opened from {words.lower()} (from {message.sender}).",
            seen={"message_id": message.pk, "orders": where.opened_orders},
        )
    placing.link(message, where)
    return where


def _to_sorting(message: Message, reason: str) -> None:
    Message.objects.filter(pk=message.pk).update(
        status=Message.Status.NEEDS_SORTING, sorting_reason=reason
    )


def placed(message: Message) -> dict[str, Any]:
    """Where the message went: its status, and its tickets with the orders each covers."""
    tickets = [
        {"id": p.ticket_id, "orders": list(p.orders), "added": p.added}
        for p in message.placements.order_by("id")
    ]
    return {"status": message.status, "tickets": tickets}


def acknowledge(item: Item, where: dict[str, Any]) -> dict[str, Any]:
    """One email to the sender, except about a ticket it opened that tells the customer itself:
    an acknowledgment then a refusal a second later would say two things at once."""
    lease = current_lease()
    message = _message(item)
    if any("sender" in p for p in message_problems(sender=message.sender, body="x")):
        return {"sent": False, "why": "the sender's address is not one we can write to"}
    opened = Ticket.objects.filter(pk__in=[t["id"] for t in where["tickets"] if not t["added"]])
    telling = {pk for pk, r in opened.values_list("pk", "reading") if (r or {}).get(TICKET_TELLS)}
    where = {**where, "tickets": [t for t in where["tickets"] if t["id"] not in telling]}
    if telling and not where["tickets"]:
        return {"sent": False, "why": "the ticket it opened tells the customer"}
    ticket_id: int | None = message.ticket_id
    if message.status == Message.Status.ANSWERED and ticket_id:
        kind, facts = "refund_status", refund_status(message)
    else:
        ticket_id = where["tickets"][0]["id"] if where["tickets"] else None
        kind, facts = "acknowledgment", acknowledgment(message, where)
    # Once per message: the outbox keeps one email per key, whatever re-reads the message.
    mail.send_worded(
        ticket_id=ticket_id,
        lease=lease,
        key=message.ack_key,
        to=message.sender,
        kind=kind,
        facts=facts,
        language=(message.reading or {}).get("language", ""),
    )
    return {"sent": True}


def refund_status(message: Message) -> dict[str, Any]:
    """The facts of the answer to "where is my refund"."""
    ticket = Ticket.objects.select_related("order").get(pk=message.ticket_id)
    progress = selectors.refund_progress(ticket)
    if progress is not None:
        state = {"on_its_way": "on_its_way", "failed": "refund_failed"}.get(
            progress["state"], "refunded"
        )
    else:
        state = {
            Ticket.Status.AWAITING_REVIEW: "review",
            Ticket.Status.AWAITING_CUSTOMER: "customer",
            Ticket.Status.DECLINED: "declined",
            Ticket.Status.REJECTED: "declined",
        }.get(ticket.status, "open")
    return {
        "subject": message.subject,
        "first_name": (message.sender_name.split() or [""])[0],
        "orders": ticket.order_numbers(),
        "state": state,
        "amount_cents": ticket.amount_cents,
        "on": day_words(timezone.localdate(ticket.updated_at)),
        "why": ticket.outcome_reason,
    }


def acknowledgment(message: Message, where: dict[str, Any]) -> dict[str, Any]:
    """What happens next; never why a message waits for a person (another's order, maybe)."""
    opened = [t for t in where["tickets"] if not t["added"]]
    added = [t for t in where["tickets"] if t["added"]]
    return {
        "subject": message.subject,
        "first_name": (message.sender_name.split() or [""])[0],
        "opened": [n for t in opened for n in t["orders"]],
        "opened_requests": len(opened),
        "added": [n for t in added for n in t["orders"]],
        "gave_order": bool((message.reading or {}).get("orders")),
    }
