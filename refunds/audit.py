"""record() runs in the transaction of the change it audits, so both commit together."""

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
    """`amount_cents`: the ticket's amount as this action leaves it; else as it stands."""
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
