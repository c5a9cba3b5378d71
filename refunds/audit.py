"""The audit trail: one append-only AuditEvent per action on a ticket. Services call record()
in the same transaction as the change they audit, so an action and its record commit together."""

from __future__ import annotations

from typing import Any

from refunds.models import AuditEvent, Ticket


def record(
    ticket: Ticket | int,
    action: str,
    *,
    actor=None,
    seen: dict[str, Any] | None = None,
    answer: dict[str, Any] | None = None,
    checkpoint_id: str = "",
    note: str = "",
    amount_cents: int | None = None,
) -> AuditEvent:
    """`amount_cents` is the ticket's amount as this action leaves it (paid, forked to); left
    out, the ticket's amount as it stands (the caller's copy, else the row)."""
    ticket_id = ticket if isinstance(ticket, int) else ticket.pk
    if amount_cents is None:
        amount_cents = (
            Ticket.objects.filter(pk=ticket).values_list("amount_cents", flat=True).first()
            if isinstance(ticket, int)
            else ticket.amount_cents
        )
    return AuditEvent.objects.create(
        ticket_id=ticket_id,
        actor=actor if actor is not None and actor.is_authenticated else None,
        action=action,
        seen=seen or {},
        answer=answer or {},
        checkpoint_id=checkpoint_id,
        note=note,
        amount_cents=amount_cents,
    )
