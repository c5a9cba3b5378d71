"""Customer email through Django's mail framework, once per key, via the outbox table."""

from __future__ import annotations

from django.core.mail import EmailMessage
from django.db import IntegrityError
from django.utils import timezone

from refunds.models import Email, ticket_pk


def send_once(*, key: str, ticket_key: str, to: str, subject: str, body: str) -> None:
    ticket_id = ticket_pk(ticket_key)
    try:
        outbox, _ = Email.objects.get_or_create(
            key=key, defaults={"ticket_id": ticket_id, "to": to, "subject": subject, "body": body}
        )
    except IntegrityError:
        outbox = Email.objects.get(key=key)
    if outbox.sent_at is not None:
        return
    message = EmailMessage(
        outbox.subject, outbox.body, to=[outbox.to], headers={"X-Refund-Key": key}
    )
    message.send()
    # A crash between send() and this UPDATE sends the message again on the re-run: SMTP has no
    # idempotency key. The window is one UPDATE wide; everything else about a re-run is a no-op.
    Email.objects.filter(pk=outbox.pk, sent_at__isnull=True).update(sent_at=timezone.now())
