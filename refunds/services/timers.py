"""The review desk's timers, run by Celery beat: escalate overdue reviews, remind managers."""

from __future__ import annotations

import logging
import uuid
from datetime import timedelta

from django.conf import settings
from django.contrib.auth import get_user_model
from django.db import transaction
from django.db.models import F, Q
from django.urls import reverse
from django.utils import timezone

from refunds import audit, emails, mail, outbox
from refunds.flow.errors import EffectBusy, MailRefused, MailRetryable
from refunds.flow.words import dollars
from refunds.models import ROLE_GROUPS, AuditEvent, Email, Role, Ticket

log = logging.getLogger(__name__)


def reviews_escalate_overdue(*, now=None) -> dict[str, list[int]]:
    """Escalate overdue agent reviews and remind managers; two beats at once escalate once."""
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
    not_reminded = overdue.exclude(reminded_for=F("pending_interrupt_id"))
    due = list(not_reminded.select_related("order").order_by("review_since"))
    reminded = _remind_managers(due, now)
    reminders_deliver(_reminders())
    return {"escalated": escalated, "reminded": [t.pk for t in reminded]}


def _remind_managers(due: list[Ticket], now) -> list[Ticket]:
    """Mark due reviews reminded (a CAS: two beats remind once) with their emails, atomically."""
    to = list(
        get_user_model()
        .objects.filter(groups__name=ROLE_GROUPS[Role.MANAGER], is_active=True)
        .exclude(email="")
        .values_list("pk", "email")
        .distinct()
    )
    if due and not to:
        log.warning("%s overdue reviews, but no manager has an email address", len(due))
        return []
    reminded = []
    with transaction.atomic():
        for ticket in due:
            if (
                Ticket.objects.filter(
                    pk=ticket.pk, pending_interrupt_id=ticket.pending_interrupt_id
                )
                .exclude(reminded_for=F("pending_interrupt_id"))
                .update(reminded_for=ticket.pending_interrupt_id)
            ):
                reminded.append(ticket)
        if reminded:
            subject, body = _reminder(reminded, now)
            batch = uuid.uuid4().hex[:16]
            Email.objects.bulk_create(
                Email(key=f"{REMINDER_PREFIX}{batch}:{pk}", to=email, subject=subject, body=body)
                for pk, email in to
            )
    return reminded


def reminders_deliver(owned: Q) -> None:
    """Deliver unsent reminders through the outbox's claim; after a few tries an admin resends."""
    waiting = Email.objects.filter(owned, attempts__lt=3).exclude(status=Email.Status.SENT)
    for email_id in waiting.values_list("pk", flat=True):
        try:
            mail.resend(email_id)
        except (MailRefused, MailRetryable, EffectBusy) as exc:
            log.warning("reminder %s not delivered: %s", email_id, exc)


def customer_reminder(ticket: Ticket, key: str, kind: str, facts: dict) -> None:
    """A reminder to the ticket's customer, worded in their language, put in the outbox unsent
    (the caller's timer delivers it; reminders_deliver)."""
    facts = {
        "customer_name": ticket.order.customer_name,
        "orders": ticket.order_numbers(),
        "reminder": True,
    } | facts
    worded = emails.word(kind, facts, str((ticket.reading or {}).get("language") or ""))
    Email.objects.create(
        ticket=ticket,
        key=key,
        to=ticket.order.customer_email,
        subject=worded.subject,
        body=worded.body,
        language=worded.language,
        desk_text=worded.desk_text,
    )


def _reminder(tickets: list[Ticket], now) -> tuple[str, str]:
    lines = [
        f"- Order {t.order.number}: {dollars(t.amount_cents)}, waiting "
        f"{int((now - t.review_since).total_seconds() // 60)} minutes (ticket {t.pk})"
        for t in tickets
    ]
    subject = f"Refund Desk: {len(tickets)} review{'s' if len(tickets) != 1 else ''} overdue"
    body = (
        "These refund reviews have waited longer than "
        f"{settings.REFUNDS_REVIEW_ESCALATE_MINUTES:g} minutes:\n\n"
        + "\n".join(lines)
        + "\n\nThey are in the managers' queue now.\n\nRefund Desk"
    )
    return subject, body


# Managers' reminders: no run sends them; the timer or a Resend claims each (conditionally).
REMINDER_PREFIX = "reminder:"


def _reminders() -> Q:
    return Q(key__startswith=REMINDER_PREFIX)


def _about(emails: list[Email]) -> dict[int, tuple[str, str]]:
    return {
        e.pk: (f"Reminder to a manager: {e.subject}", reverse("reviews:queue"))
        for e in emails
        if e.key.startswith(REMINDER_PREFIX)
    }


REMINDERS = outbox.OtherRun(owns=_reminders, settled=_reminders, about=_about)
