"""Customer email through Django's mail framework, once, through the outbox table.

send_once(), for a run that holds the thread's lease:
1. Write the outbox row if it is not there (one row per message key).
2. Hold the effect lock for the key (refunds/locks.py): a process paused mid-send keeps it, so
   its successor waits instead of sending a second copy.
3. Claim the row with one conditional UPDATE: status "sending", claimed by this lease epoch, only
   while that epoch holds the ticket. A worker that lost its epoch never sends.
4. Call the mail server (EMAIL_TIMEOUT bounds every step of the conversation).
5. Mark the row sent; a dropped database connection is reopened and the mark retried, so a blip
   between 4 and 5 does not leave a delivered message looking unsent.

What "once" means: at most once per lease epoch. One window remains, and no SMTP server can close
it: a process killed after the server accepted the message and before step 5 committed. The next
epoch finds the row still "sending" and sends again. Every copy carries the same Message-ID, so a
mail system that de-duplicates can tell. On PostgreSQL a claim younger than the send window (the
longest a live sender can still be talking to the server) is left alone even when its lock is
free: a database blip drops the advisory lock while its holder may still be sending.
"""

from __future__ import annotations

import logging
import smtplib
import socket
import time
import uuid
from datetime import timedelta

from django.conf import settings
from django.core.mail import EmailMessage, get_connection
from django.db import InterfaceError, OperationalError, connection
from django.db.models import F, Q
from django.db.models.functions import Now
from langgraph.errors import GraphDrained

from refunds import metrics
from refunds.flow.errors import EffectBusy, MailRefused, MailRetryable
from refunds.lease import Lease
from refunds.locks import effect_lock
from refunds.models import Email, Ticket

log = logging.getLogger(__name__)


def send_window() -> timedelta:
    """How long a live sender may still be inside one SMTP conversation, though its effect lock
    is free. On SQLite (one machine, a kernel file lock) a free lock means its holder is gone."""
    if connection.vendor == "sqlite":
        return timedelta(0)
    return timedelta(seconds=2 * settings.EMAIL_TIMEOUT + 1)


def send_once(*, ticket_id: int, lease: Lease, key: str, to: str, subject: str, body: str) -> None:
    lease.check()
    _ensure_row(ticket_id=ticket_id, key=key, to=to, subject=subject, body=body)
    claim = f"epoch:{lease.epoch}"
    with effect_lock(key) as held:
        if not held:
            raise EffectBusy(f"another process is sending {key}")
        lease.check()
        claimed = _claim(key, claim, Q(ticket__lease_epoch=lease.epoch))
        if not claimed:
            row = Email.objects.filter(key=key).values("status", "claimed_by").get()
            if row["status"] == Email.Status.SENT:
                return
            if not Ticket.objects.filter(pk=ticket_id, lease_epoch=lease.epoch).exists():
                raise GraphDrained(f"lease epoch {lease.epoch} of ticket {ticket_id} lost")
            raise EffectBusy(f"{key} was claimed by {row['claimed_by']} moments ago")
        _deliver(key, claim)


def resend(email_id: int) -> bool:
    """Send an outbox message again outside any run (an admin's Resend): True once delivered
    (now or before). Only a final ticket's messages: no run will send them concurrently."""
    email = Email.objects.select_related("ticket").get(pk=email_id)
    if email.status == Email.Status.SENT:
        return True
    claim = f"resend:{uuid.uuid4().hex[:12]}"
    with effect_lock(email.key) as held:
        if not held:
            raise EffectBusy(f"another process is sending {email.key}")
        if not _claim(email.key, claim, Q(ticket__status__in=Ticket.FINAL)):
            return Email.objects.filter(pk=email_id, status=Email.Status.SENT).exists()
        _deliver(email.key, claim)
    return True


def _ensure_row(*, ticket_id: int, key: str, to: str, subject: str, body: str) -> None:
    # INSERT .. ON CONFLICT DO NOTHING: a row written by a run before this one stays as it is.
    Email.objects.bulk_create(
        [Email(ticket_id=ticket_id, key=key, to=to, subject=subject, body=body)],
        ignore_conflicts=True,
    )


def _claim(key: str, claim: str, holds: Q) -> bool:
    """One conditional UPDATE: the row becomes ours to send, if nobody sent it, nobody else is
    (or may still be) sending it, and our right to send (`holds`) stands."""
    free = (
        Q(status=Email.Status.PENDING)
        | Q(claimed_by=claim)
        | Q(claimed_at__isnull=True)
        | Q(claimed_at__lt=Now() - send_window())  # its sender died (we hold the lock)
    )
    return bool(
        Email.objects.filter(free, holds, key=key)
        .exclude(status=Email.Status.SENT)
        .update(
            status=Email.Status.SENDING,
            claimed_by=claim,
            claimed_at=Now(),
            attempts=F("attempts") + 1,
        )
    )


def _deliver(key: str, claim: str) -> None:
    email = Email.objects.get(key=key)
    message = EmailMessage(
        email.subject,
        email.body,
        to=[email.to],
        headers={"X-Refund-Key": key, "Message-ID": email.message_id},
    )
    # The connection is opened here and closed after the row is marked: the mark follows the
    # server's "250 accepted" at once, not after the QUIT round trip, which keeps the one window
    # of "mail once" (accepted, not yet marked) as short as a single UPDATE.
    backend = get_connection()
    try:
        backend.open()
        backend.send_messages([message])
    except Exception as exc:
        backend_close(backend)
        error = _classify(exc)
        if error is None:
            raise
        metrics.MAIL_FAILURES.labels(
            kind="refused" if isinstance(error, MailRefused) else "retryable"
        ).inc()
        _write(
            Email.objects.filter(key=key, claimed_by=claim).exclude(status=Email.Status.SENT),
            status=Email.Status.PENDING,
            claimed_by="",
            claimed_at=None,
            last_error=str(error)[:2000],
        )
        raise error from exc
    _write(
        Email.objects.filter(key=key).exclude(status=Email.Status.SENT),
        status=Email.Status.SENT,
        sent_at=Now(),
        last_error="",
    )
    backend_close(backend)


def backend_close(backend) -> None:
    try:
        backend.close()
    except Exception:  # noqa: BLE001 - the message went out (or not) before; QUIT is courtesy
        log.debug("closing the mail connection failed", exc_info=True)


def _classify(exc: Exception) -> MailRetryable | MailRefused | None:
    """What an SMTP failure means for the next try; None for a bug, which propagates as it is."""
    if isinstance(exc, smtplib.SMTPRecipientsRefused):
        codes = [code for code, _ in exc.recipients.values()]
        if all(code >= 500 for code in codes):
            return MailRefused(f"the mail server refused the recipient: {exc.recipients}")
        return MailRetryable(f"the mail server deferred the recipient: {exc.recipients}")
    if isinstance(exc, smtplib.SMTPResponseException):
        text = exc.smtp_error.decode(errors="replace") if isinstance(exc.smtp_error, bytes) else ""
        if exc.smtp_code >= 500:
            return MailRefused(f"the mail server refused the message: {exc.smtp_code} {text}")
        return MailRetryable(f"the mail server deferred the message: {exc.smtp_code} {text}")
    if isinstance(exc, smtplib.SMTPException | OSError | socket.timeout):
        return MailRetryable(f"the mail server could not be reached: {exc!r}")
    return None


def _write(qs, **fields) -> None:
    """An UPDATE that records a fact: retried on a fresh connection if the database dropped ours
    (a blip after the server accepted the message must not make it look unsent)."""
    for attempt in range(10):
        try:
            qs.update(**fields)
            return
        except (OperationalError, InterfaceError):
            if attempt == 9 or connection.in_atomic_block:
                raise
            log.warning("outbox: database connection lost; recording again", exc_info=True)
            connection.close()
            time.sleep(0.2 * (attempt + 1))
