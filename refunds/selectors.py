"""Reads that pages and the API share."""

from __future__ import annotations

from refunds.models import Ticket

EARLIER_LIMIT = 10


def earlier_tickets(ticket: Ticket) -> dict[str, list[Ticket]]:
    """Other tickets of the same order, and of the same customer's other orders, newest first:
    what a reviewer checks before refunding again."""
    others = Ticket.objects.exclude(pk=ticket.pk).select_related("order").order_by("-id")
    return {
        "order": list(others.filter(order_id=ticket.order_id)[:EARLIER_LIMIT]),
        "customer": list(
            others.filter(order__customer_email__iexact=ticket.order.customer_email).exclude(
                order_id=ticket.order_id
            )[:EARLIER_LIMIT]
        ),
    }
