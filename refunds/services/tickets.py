"""A ticket's life outside the desk: open, retry, fork, resend its email."""

from __future__ import annotations

import uuid
from collections.abc import Sequence
from typing import Any

from django.core.exceptions import PermissionDenied
from django.db import IntegrityError, transaction

from core.clock import local_words
from refunds import audit, enqueue, order_source, outbox, permissions, policy
from refunds.flow.nodes.asking import CLOSED_SUFFIX
from refunds.flow.state import FLOW_VERSION
from refunds.flow.words import dollars
from refunds.models import (
    AuditEvent,
    CustomerQuestion,
    Email,
    Fork,
    Order,
    Ticket,
    TicketOrder,
    order_number_read,
    same_customer,
)
from refunds.money import money_moved, refundable_cents
from refunds.services.errors import (
    NOTE_MAX,
    REASON_MAX,
    OrdersRefused,
    RefundError,
    ShopUnavailable,
    TicketAlreadyOpen,
)

OPENER: Any = object()  # `actor` left out: the opener acts (all but a message's ticket)
ORDERS_MAX = 20  # orders one ticket may cover: a customer's batch, not a whole shop


def ticket_open(
    *,
    order_number: str = "",
    order_numbers: Sequence[str] | None = None,
    note: str = "",
    opened_by=None,
    actor: Any = OPENER,
    reason: str = policy.LATE_DELIVERY,
    reading: dict | None = None,
) -> Ticket:
    """Open a ticket for one customer's orders (the first is Ticket.order); TicketAlreadyOpen
    when one has an open ticket. `opened_by` is whom four-eyes keeps from deciding it; `actor`,
    who opens it when that is not the opener (a colleague sorting), must be in a desk group."""
    if actor is OPENER:
        actor = opened_by
    if actor is not None:
        permissions.deny(permissions.open_refusal(actor))
    numbers = order_numbers_clean([order_number] if order_numbers is None else order_numbers)
    if "\x00" in (note or ""):
        raise RefundError("The note holds a NUL character; remove it.")
    if len(note or "") > NOTE_MAX:
        raise RefundError(f"The note is too long ({len(note)} characters, at most {NOTE_MAX}).")
    if reason not in policy.TICKET_REASONS:
        raise RefundError(f"{policy.REASONS.get(reason, repr(reason))} opens no refund ticket.")
    orders = _one_customers_orders(numbers)
    if erased := [o.erased_words() for o in orders if o.erased_at is not None]:
        raise OrdersRefused(" ".join(erased))
    existing = _open_ticket_of(orders)
    if existing is not None:
        raise _already_open(*existing, note, actor)
    first = orders[0]
    try:
        with transaction.atomic():
            # Stale open links of finished tickets close: the partial UNIQUE index counts them.
            TicketOrder.close_finished([o.pk for o in orders])
            ticket = Ticket.objects.create(
                thread_id=f"refund-{first.number}-{uuid.uuid4().hex[:10]}",
                order=first,
                note=(note or "").strip(),
                opened_by=opened_by if opened_by and opened_by.is_authenticated else None,
                reason=reason,
                reading=reading,
                flow_version=FLOW_VERSION,  # the shape its thread starts with (see flow/state.py)
            )
            TicketOrder.objects.bulk_create(
                TicketOrder(ticket=ticket, order=order, position=i)
                for i, order in enumerate(orders[1:], start=1)
            )
            # Its checks have not run yet: the amount it opens at is the orders' fees asked.
            asked = sum(o.shipping_fee_cents for o in orders)
            audit.record(
                ticket, AuditEvent.Action.OPEN, actor=actor, note=ticket.note, amount_cents=asked
            )
            enqueue.advance_on_commit(ticket.pk)
    except IntegrityError:  # two requests at once: the partial UNIQUE index let one through
        existing = _open_ticket_of(orders)
        if existing is None:
            raise
        raise _already_open(*existing, note, actor) from None
    return ticket


def order_numbers_clean(numbers: Sequence[str]) -> list[str]:
    """The order numbers asked for, stripped, each once, in the order given."""
    given = [raw for raw in numbers if not isinstance(raw, str) or raw.strip()]
    try:
        cleaned = list(dict.fromkeys(order_number_read(raw) for raw in given))
    except ValueError as exc:
        raise RefundError(str(exc)) from None
    if not cleaned:
        raise RefundError("Enter an order number.")
    if len(cleaned) > ORDERS_MAX:
        raise RefundError(
            f"A ticket covers at most {ORDERS_MAX} orders ({len(cleaned)} given); "
            "open another for the rest."
        )
    return cleaned


def _open_ticket_of(orders: list[Order]) -> tuple[Ticket, str] | None:
    """An open ticket covering one of these orders, and which order, or None."""
    links = TicketOrder.objects.filter(order__in=orders, ticket__status__in=Ticket.OPEN)
    link = links.select_related("ticket__order", "order").order_by("ticket_id").first()
    return (link.ticket, link.order.number) if link is not None else None


def order_find(*, order_number: str) -> Order | None:
    """The desk's order, or else the shop's (REFUNDS_ORDER_SOURCE), stored; None when neither."""
    order = Order.objects.filter(number=order_number).first()
    if order is not None:
        return order
    try:
        return order_source.fetch(order_number)
    except order_source.OrderSourceError as exc:
        raise ShopUnavailable(str(exc)) from exc


def _one_customers_orders(numbers: Sequence[str]) -> list[Order]:
    orders = []
    for number in numbers:
        order = order_find(order_number=number)
        if order is None:
            raise OrdersRefused(f"There is no order {number}.")
        orders.append(order)
    if any(not same_customer(o.customer_email, orders[0].customer_email) for o in orders):
        raise OrdersRefused(
            "A ticket covers one customer's orders; "
            + ", ".join(f"{o.number} is {o.customer_email}'s" for o in orders)
            + "."
        )
    return orders


def _already_open(ticket: Ticket, number: str, note: str, by) -> TicketAlreadyOpen:
    """The open ticket, the note kept on it: a second report often has the detail that matters."""
    note = (note or "").strip()
    if note:
        actor = by if by and by.is_authenticated else None
        audit.record(ticket, AuditEvent.Action.NOTE, actor=actor, note=note)
    return TicketAlreadyOpen(ticket, note_kept=bool(note), number=number)


def email_resend(*, email_id: int, by) -> None:
    """Admin: send an undelivered email of a finished ticket again (through the outbox, once)."""
    if not permissions.is_admin(by):
        raise PermissionDenied("Only admins resend emails.")
    email = Email.objects.select_related("ticket").filter(pk=email_id).first()
    if email is None:
        raise RefundError("There is no such email.")
    if email.status == Email.Status.SENT:
        when = f" ({local_words(email.sent_at)})" if email.sent_at else ""
        raise RefundError(f"That email was already delivered{when}.")
    other = outbox.owner(email)
    if not Email.objects.filter(outbox.resendable(), pk=email.pk).exists():
        if other is not None:
            raise RefundError(other.busy)
        if email.ticket is None:
            raise RefundError("That email belongs to no ticket and no other run; nothing sends it.")
        if _reopened(email):
            raise RefundError(
                "That email says the ticket is closed for want of a reply, and it is not any "
                "more: the customer's reply reopened it."
            )
        raise RefundError("The ticket is still running; its own run sends this email.")
    with transaction.atomic():
        if email.ticket is not None:
            audit.record(
                email.ticket,
                AuditEvent.Action.RESEND,
                actor=by,
                seen={"key": email.key, "last_error": email.last_error},
            )
        if other is not None:
            other.resent(email, by)
        enqueue.resend_on_commit(email.pk)


def _reopened(email: Email) -> bool:
    """An email saying the ticket is closed for want of a reply, which a reply reopened since."""
    asked = email.key.removesuffix(CLOSED_SUFFIX)
    return (
        asked != email.key
        and CustomerQuestion.objects.filter(email_key=asked, reopened_at__isnull=False).exists()
    )


def ticket_retry(*, ticket: Ticket, by=None) -> bool:
    """Admin action: put a failed ticket back in line with a fresh attempt budget."""
    with transaction.atomic():
        won = Ticket.objects.filter(pk=ticket.pk, status=Ticket.Status.FAILED).update(
            status=Ticket.Status.RUNNING, attempts=0, lease_owner="", lease_expires_at=None
        )
        if won:
            audit.record(
                ticket, AuditEvent.Action.RETRY, actor=by, seen={"error": ticket.last_error}
            )
            enqueue.advance_on_commit(ticket.pk)
    return bool(won)


FORKABLE = (Ticket.Status.AWAITING_REVIEW, Ticket.Status.REJECTED, Ticket.Status.FAILED)
FORK_MAX_CENTS = 1_000_000


def ticket_fork(
    *, ticket: Ticket, amount_cents: int, reason: str, by, from_checkpoint_id: str = ""
) -> Fork:
    """Admin: fork with a corrected amount; its new review's interrupt id refuses old answers."""
    if not permissions.is_admin(by):
        raise PermissionDenied("Only admins fork a thread.")
    reason = (reason or "").strip()
    fork_checked(ticket, amount_cents, reason)
    try:
        with transaction.atomic():
            # A claim on the old review ends with it: the fork's review starts unclaimed.
            moved = Ticket.objects.filter(pk=ticket.pk, status__in=FORKABLE).update(
                status=Ticket.Status.RUNNING,
                attempts=0,
                last_error="",
                claimed_by=None,
                claim_expires_at=None,
            )
            if not moved:
                raise RefundError("The ticket moved on meanwhile; reload it and try again.")
            # Open again: its order's link too (a finished ticket's stale link closed first).
            TicketOrder.close_finished([ticket.order_id])
            TicketOrder.objects.filter(ticket=ticket).update(open=True)
            fork = Fork.objects.create(
                ticket=ticket,
                by=by,
                amount_cents=amount_cents,
                reason=reason,
                from_checkpoint_id=from_checkpoint_id,
            )
            audit.record(
                ticket,
                AuditEvent.Action.FORK,
                actor=by,
                seen={"amount_cents": ticket.amount_cents, "status": ticket.status},
                answer={"amount_cents": amount_cents, "from_checkpoint_id": from_checkpoint_id},
                note=reason,
                amount_cents=amount_cents,
            )
            enqueue.advance_on_commit(ticket.pk)
    except IntegrityError:  # reopening it would make a second open ticket for the order
        other = Ticket.objects.open().filter(order=ticket.order_id).exclude(pk=ticket.pk).first()
        raise RefundError(
            f"Order {ticket.order.number} has another open ticket ({other.pk if other else '?'});"
            " finish that one first."
        ) from None
    return fork


def fork_checked(ticket: Ticket, amount_cents: int, reason: str) -> None:
    """What refuses a fork, in words, before anything is written."""
    if isinstance(amount_cents, bool) or not isinstance(amount_cents, int):
        raise RefundError("The corrected amount must be a whole number of cents.")
    if not 0 < amount_cents <= FORK_MAX_CENTS:
        raise RefundError(
            f"The corrected amount must be between {dollars(1)} and {dollars(FORK_MAX_CENTS)}."
        )
    if amount_cents == ticket.amount_cents:
        raise RefundError(
            f"The ticket's amount is already {dollars(amount_cents)}; a fork must change it."
        )
    if not reason:
        raise RefundError("Say why the thread is forked; the reason is kept with the audit entry.")
    if len(reason) > REASON_MAX:
        raise RefundError(f"The reason is too long (at most {REASON_MAX} characters).")
    charge = money_moved(ticket)
    if charge is not None:
        raise RefundError(
            f"Money already moved for this ticket (receipt {charge.receipt}); "
            "a fork cannot undo a charge."
        )
    if ticket.order.erased_at is not None:
        raise RefundError(ticket.order.erased_words())
    balance = refundable_cents(ticket.order)
    if amount_cents > balance:
        raise RefundError(
            f"Order {ticket.order.number} has {dollars(balance)} left to refund of its "
            f"{dollars(ticket.order.shipping_fee_cents)} shipping fee; a fork cannot ask for more."
        )
    if ticket.links.count() > 1:
        raise RefundError(
            "A ticket of several orders cannot be forked; a reviewer lowers any order's amount "
            "in the review instead."
        )
    if ticket.status not in FORKABLE:
        raise RefundError(
            "Only a ticket awaiting review, rejected or failed can be forked; "
            f"this one is {ticket.get_status_display().lower()}."
        )
