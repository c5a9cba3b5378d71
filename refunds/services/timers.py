"""The review desk's timers, run by Celery beat: escalate overdue reviews, remind managers."""

from __future__ import annotations

import logging
from datetime import timedelta

from django.conf import settings
from django.contrib.auth import get_user_model
from django.core.mail import send_mail
from django.db import transaction
from django.db.models import F
from django.utils import timezone

from refunds import audit
from refunds.flow.words import dollars
from refunds.models import (
    ROLE_GROUPS,
    AuditEvent,
    Role,
    Ticket,
)

log = logging.getLogger(__name__)


def reviews_escalate_overdue(*, now=None) -> dict[str, list[int]]:
    """The escalation timers (run by Celery beat): an agent-level review waiting past
    REFUNDS_REVIEW_ESCALATE_MINUTES goes to managers, and managers get one reminder email per
    overdue review, listing them. Conditional UPDATEs: two beats at once escalate once."""
    now = now or timezone.now()
    limit = now - timedelta(minutes=settings.REFUNDS_REVIEW_ESCALATE_MINUTES)
    overdue = Ticket.objects.awaiting().filter(review_since__lte=limit)
    escalated = []
    for ticket in overdue.filter(required_role="agent").exclude(
        escalated_for=F("pending_interrupt_id")
    ):
        with transaction.atomic():
            won = (
                Ticket.objects.filter(
                    pk=ticket.pk, pending_interrupt_id=ticket.pending_interrupt_id
                )
                .exclude(escalated_for=F("pending_interrupt_id"))
                .update(
                    escalated_for=ticket.pending_interrupt_id,
                    escalation_note="Waited too long for an agent.",
                )
            )
            if won:
                escalated.append(ticket.pk)
                audit.record(
                    ticket,
                    AuditEvent.Action.ESCALATE,
                    seen={
                        "interrupt_id": ticket.pending_interrupt_id,
                        "since": str(ticket.review_since),
                    },
                    answer={"to": "manager", "by": "timer"},
                    note="Waited too long for an agent.",
                )
    reminded = []
    due = list(
        overdue.exclude(reminded_for=F("pending_interrupt_id"))
        .select_related("order")
        .order_by("review_since")
    )
    for ticket in due:
        if (
            Ticket.objects.filter(pk=ticket.pk, pending_interrupt_id=ticket.pending_interrupt_id)
            .exclude(reminded_for=F("pending_interrupt_id"))
            .update(reminded_for=ticket.pending_interrupt_id)
        ):
            reminded.append(ticket)
    if reminded:
        _remind_managers(reminded, now)
    return {"escalated": escalated, "reminded": [t.pk for t in reminded]}


def _remind_managers(tickets: list[Ticket], now) -> None:
    to = list(
        get_user_model()
        .objects.filter(groups__name=ROLE_GROUPS[Role.MANAGER], is_active=True)
        .exclude(email="")
        .values_list("email", flat=True)
        .distinct()
    )
    if not to:
        log.warning("%s overdue reviews, but no manager has an email address", len(tickets))
        return
    lines = []
    for t in tickets:
        waited = int((now - t.review_since).total_seconds() // 60)
        lines.append(
            f"- Order {t.order.number}: {dollars(t.amount_cents)}, waiting {waited} minutes "
            f"(ticket {t.pk})"
        )
    send_mail(
        subject=f"Refund Desk: {len(tickets)} review{'s' if len(tickets) != 1 else ''} overdue",
        message=(
            "These refund reviews have waited longer than "
            f"{settings.REFUNDS_REVIEW_ESCALATE_MINUTES:g} minutes:\n\n"
            + "\n".join(lines)
            + "\n\nThey are in the managers' queue now.\n\nRefund Desk"
        ),
        from_email=None,
        recipient_list=to,
    )
