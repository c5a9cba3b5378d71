"""One message's orders into tickets, for the intake and for a person sorting alike."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from intake.models import Message, MessageTicket
from refunds.models import Ticket
from refunds.services import RefundError, TicketAlreadyOpen, ticket_open


@dataclass
class Placed:
    """The ticket opened (None: every order had one open), and the open tickets added to."""

    opened: Ticket | None = None
    opened_orders: list[str] = field(default_factory=list)
    added: list[tuple[Ticket, list[str]]] = field(default_factory=list)

    @property
    def first(self) -> Ticket:
        """Message.ticket: the ticket opened, or else the first one it was added to."""
        return self.opened if self.opened is not None else self.added[0][0]


def open_or_add(numbers: list[str], **open_kwargs: Any) -> Placed:
    """ticket_open for the orders left; an order with an open ticket takes that ticket's orders
    out and the rest is asked again (each round takes one out: it ends)."""
    placed = Placed()
    left = list(dict.fromkeys(numbers))
    while left:
        try:
            ticket = ticket_open(order_numbers=left, **open_kwargs)
        except TicketAlreadyOpen as exc:
            covers = set(exc.ticket.order_numbers()) | {exc.number}
            taken = [n for n in left if n in covers]
            if not taken:  # an order found by another spelling: never loop on it
                raise RefundError(
                    f"Order {exc.number} has an open ticket ({exc.ticket.pk})."
                ) from exc
            placed.added.append((exc.ticket, taken))
            left = [n for n in left if n not in covers]
            continue
        placed.opened, placed.opened_orders = ticket, ticket.order_numbers()
        break
    return placed


def link(message: Message, where: Placed) -> None:
    """Record where the message went, in the caller's placing transaction."""
    status = Message.Status.OPENED if where.opened else Message.Status.ADDED
    Message.objects.filter(pk=message.pk).update(status=status, ticket=where.first)
    rows = [MessageTicket(message=message, ticket=t, orders=o, added=True) for t, o in where.added]
    if where.opened is not None:
        rows.append(MessageTicket(message=message, ticket=where.opened, orders=where.opened_orders))
    MessageTicket.objects.bulk_create(rows)
