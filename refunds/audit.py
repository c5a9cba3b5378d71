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
) -> AuditEvent:
    ticket_id = ticket if isinstance(ticket, int) else ticket.pk
    return AuditEvent.objects.create(
        ticket_id=ticket_id,
        actor=actor if actor is not None and actor.is_authenticated else None,
        action=action,
        seen=seen or {},
        answer=answer or {},
        checkpoint_id=checkpoint_id,
        note=note,
    )
