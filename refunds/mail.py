"""Customer email through Django's mail framework, once, through the outbox table.

send_once(), for a run that holds the thread's lease:
1. Hold the effect lock for the key (refunds/locks.py): a process paused mid-send keeps it, so
   its successor waits instead of sending a second copy.
2. Write the outbox row if it is not there and claim it, in one statement: status "sending",
   claimed by this lease epoch, only while that epoch holds the ticket. A worker that lost its
   epoch never sends.
3. Talk to the mail server (EMAIL_TIMEOUT bounds every step of the conversation). The row's
   "sent" mark is written in a transaction opened before the final "." of the message and
   committed as soon as the server accepts it; a refusal rolls it back.
4. If the database went away just then, the mark is written again on a fresh connection.

What "once" means: at most once per lease epoch. One window remains, and no SMTP server lets us
close it: a process killed after the server accepted the message and before the mark's COMMIT
(a fraction of a millisecond: the write lock is already held). The next epoch finds the row
still "sending" and sends again, with the same Message-ID, so a mail system that de-duplicates
can tell. tests/test_crash.py pins this behaviour.

On PostgreSQL a claim younger than the send window (the longest a live sender can still be
talking to the server) is left alone even when its lock is free: a database blip drops the
advisory lock while its holder may still be sending.
"""

from __future__ import annotations

import logging
import re
import smtplib
import socket
import time
import uuid
from collections.abc import Callable
from datetime import timedelta

from django.conf import settings
from django.core.mail import EmailMessage, get_connection
from django.core.mail.backends.smtp import EmailBackend as SmtpBackend
from django.core.mail.message import sanitize_address
from django.db import InterfaceError, OperationalError, connection, transaction
from django.db.models import F, Q
from django.db.models.functions import Now
from langgraph.errors import GraphDrained

from core import sql
from refunds import metrics, queries
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
    claim = f"epoch:{lease.epoch}"
    with effect_lock(key) as held:
        if not held:
            raise EffectBusy(f"another process is sending {key}")
        lease.check()
        row = _claim_for_run(
            ticket_id=ticket_id, epoch=lease.epoch, key=key, to=to, subject=subject, body=body
        )
        if row is None:
            status, claimed_by = Email.objects.filter(key=key).values_list(
                "status", "claimed_by"
            ).first() or ("", "")
            if status == Email.Status.SENT:
                return
            if not Ticket.objects.filter(pk=ticket_id, lease_epoch=lease.epoch).exists():
                raise GraphDrained(f"lease epoch {lease.epoch} of ticket {ticket_id} lost")
            raise EffectBusy(f"{key} was claimed by {claimed_by} moments ago")
        _deliver(key, claim, *row)


def _claim_for_run(
    *, ticket_id: int, epoch: int, key: str, to: str, subject: str, body: str
) -> tuple[str, str, str] | None:
    """Write the outbox row if it is not there and claim it for this epoch, in one statement:
    only while the epoch holds the ticket, and only if nobody sent the message, nobody else is
    (or may still be) sending it. Returns the row's (to, subject, body) when it is ours."""
    claim = f"epoch:{epoch}"
    holds = "EXISTS (SELECT 1 FROM refunds_ticket t WHERE t.id = %s AND t.lease_epoch = %s)"
    return sql.fetchone(
        'INSERT INTO refunds_email (ticket_id, "key", "to", subject, body, status, claimed_by, '
        "claimed_at, attempts, last_error, created_at) "
        f"SELECT %s, %s, %s, %s, %s, {queries.EMAIL_SENDING}, %s, {sql.now()}, 1, '', {sql.now()} "
        f"WHERE {holds} "
        f'ON CONFLICT ("key") DO UPDATE SET status = {queries.EMAIL_SENDING}, '
        "claimed_by = excluded.claimed_by, claimed_at = excluded.claimed_at, "
        "attempts = refunds_email.attempts + 1 "
        f"WHERE refunds_email.status <> {queries.EMAIL_SENT} AND (refunds_email.status = "
        f"{queries.EMAIL_PENDING} "
        "OR refunds_email.claimed_by = excluded.claimed_by OR refunds_email.claimed_at IS NULL "
        f"OR refunds_email.claimed_at < {sql.now_minus()}) AND {holds} "
        'RETURNING "to", subject, body',
        [
            *(ticket_id, key, to, subject, body, claim),
            *(ticket_id, epoch),
            send_window().total_seconds(),
            *(ticket_id, epoch),
        ],
    )


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
        _deliver(email.key, claim, email.to, email.subject, email.body)
    return True


def _claim(key: str, claim: str, holds: Q) -> bool:
    """For a Resend: one conditional UPDATE, the row becomes ours to send if nobody sent it,
    nobody else is (or may still be) sending it, and our right to send (`holds`) stands."""
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


# Observers of a delivery: called with (key, event), event "connect" before the conversation and
# "accepted" once the server took the message, before its mark commits. Metrics and the crash
# tests' kill points hang here.
delivery_hooks: list[Callable[[str, str], None]] = []


def _emit(key: str, event: str) -> None:
    for hook in delivery_hooks:
        hook(key, event)


def _deliver(key: str, claim: str, to: str, subject: str, body: str) -> None:
    message = EmailMessage(
        subject, body, to=[to], headers={"X-Refund-Key": key, "Message-ID": message_id(key)}
    )
    backend = get_connection()
    try:
        _emit(key, "connect")
        backend.open()
        if isinstance(backend, SmtpBackend):
            _send_smtp(backend.connection, message, key, claim)
        else:  # console, file, locmem: no server to acknowledge anything
            backend.send_messages([message])
            _emit(key, "accepted")
            _mark_sent(key)
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
    backend_close(backend)


def _send_smtp(conn: smtplib.SMTP, message: EmailMessage, key: str, claim: str) -> None:
    """smtplib's sendmail, with the outbox mark held open around the end of the message.

    The row is marked sent in a transaction begun *before* the final "." goes to the server
    (on SQLite that waits for the write lock here, not after the server said yes), and committed
    the moment the server accepts; a refusal rolls the mark back. So the one window of mail
    once, a kill after the server's 250 and before the mark is durable, is as wide as a COMMIT."""
    encoding = message.encoding or settings.DEFAULT_CHARSET
    sender = sanitize_address(message.from_email, encoding)
    recipients = [sanitize_address(addr, encoding) for addr in message.recipients()]
    conn.ehlo_or_helo_if_needed()
    code, answer = conn.mail(sender)
    if code != 250:
        conn.rset()
        raise smtplib.SMTPSenderRefused(code, answer, sender)
    refused = {}
    for recipient in recipients:
        code, answer = conn.rcpt(recipient)
        if code not in (250, 251):
            refused[recipient] = (code, answer)
    if len(refused) == len(recipients):
        conn.rset()
        raise smtplib.SMTPRecipientsRefused(refused)
    code, answer = conn.docmd("data")
    if code != 354:
        conn.rset()
        raise smtplib.SMTPDataError(code, answer)
    data = re.sub(rb"(?m)^\.", b"..", message.message().as_bytes(linesep="\r\n"))
    if not data.endswith(b"\r\n"):
        data += b"\r\n"
    conn.send(data)
    for attempt in range(5):
        ended = False  # whether the final "." went to the server
        try:
            with transaction.atomic():
                if not _mark_sent_now(key, claim):
                    conn.close()  # mid-DATA: dropping the connection discards the message
                    raise EffectBusy(f"{key} is no longer claimed by {claim}")
                ended = True
                conn.send(b".\r\n")
                code, answer = conn.getreply()
                if code != 250:
                    raise smtplib.SMTPDataError(code, answer)
                _emit(key, "accepted")
            return
        except (OperationalError, InterfaceError):
            if ended:
                # The server has the message (or refused it) but the mark did not commit (the
                # database went away): record the fact again on a fresh connection.
                if code != 250:
                    raise
                _mark_sent(key)
                return
            # The database went away before the final ".": nothing is delivered yet and the row
            # is still ours (a claim younger than the send window is left to its sender), so the
            # mark is taken again on a fresh connection.
            if attempt == 4 or connection.in_atomic_block:
                conn.close()
                raise
            log.warning("outbox: database connection lost before the end of the message")
            connection.close()
            time.sleep(0.2 * (attempt + 1))


def _mark_sent_now(key: str, claim: str) -> bool:
    """The sent mark, only while the row is still claimed by this sender: it holds the row's
    write lock until the server has answered the final "."."""
    return bool(
        sql.execute(
            f"UPDATE refunds_email SET status = {queries.EMAIL_SENT}, sent_at = {sql.now()}, "
            f"last_error = '' WHERE \"key\" = %s AND status = {queries.EMAIL_SENDING} "
            "AND claimed_by = %s",
            [key, claim],
        )
    )


def _mark_sent(key: str) -> None:
    _write_sql(
        f"UPDATE refunds_email SET status = {queries.EMAIL_SENT}, sent_at = {sql.now()}, "
        f"last_error = '' WHERE \"key\" = %s AND status <> {queries.EMAIL_SENT}",
        [key],
    )


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


def message_id(key: str) -> str:
    # The same Message-ID on every attempt: a mail system that sees a message twice (the one
    # window the outbox cannot close) can tell it is one message.
    return f"<{key.replace(':', '.')}@refund-desk>"


def _write_sql(statement: str, params: list) -> None:
    _write(None, statement=(statement, params))


def _write(qs, *, statement: tuple[str, list] | None = None, **fields) -> None:
    """An UPDATE that records a fact: retried on a fresh connection if the database dropped ours
    (a blip after the server accepted the message must not make it look unsent)."""
    for attempt in range(10):
        try:
            if statement is not None:
                sql.execute(*statement)
            else:
                qs.update(**fields)
            return
        except (OperationalError, InterfaceError):
            if attempt == 9 or connection.in_atomic_block:
                raise
            log.warning("outbox: database connection lost; recording again", exc_info=True)
            connection.close()
            time.sleep(0.2 * (attempt + 1))
