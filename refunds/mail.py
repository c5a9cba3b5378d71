"""Customer email, once, through the outbox. The one window for a second copy: the sender lost
between the final "." and the server's answer; the next resends with the same Message-ID. No
transaction is open while the server talks: on SQLite it would hold every lease renewal."""

from __future__ import annotations

import logging
import re
import smtplib
import uuid
from collections.abc import Callable
from dataclasses import asdict
from typing import Any

from anymail.exceptions import AnymailAPIError
from django.conf import settings
from django.core.mail import EmailMessage, get_connection
from django.core.mail.backends.smtp import EmailBackend as SmtpBackend
from django.core.mail.message import sanitize_address
from django.db import transaction
from django.utils.crypto import salted_hmac
from langgraph.errors import GraphDrained

from core import sql
from core.network import outside_transaction
from refunds import emails, metrics, outbox
from refunds.flow.errors import EffectBusy, MailRefused, MailRetryable
from refunds.flow.nodes.asking import CLOSED_SUFFIX
from refunds.lease import Lease
from refunds.locks import effect_lock
from refunds.mail_tracking import METADATA_KEY
from refunds.models import CreditOffer, CustomerQuestion, Email

log = logging.getLogger(__name__)


def send_worded(
    *,
    ticket_id: int | None,
    lease: Lease,
    key: str,
    to: str,
    kind: str,
    facts: dict[str, Any],
    language: str,
) -> None:
    """send_once of one kind of email; a retry sends the words the outbox kept the first time."""
    worded = asdict(emails.word(kind, facts, language))
    send_once(ticket_id=ticket_id, lease=lease, key=key, to=to, **worded)


def send_once(
    *,
    ticket_id: int | None,
    lease: Lease,
    key: str,
    to: str,
    subject: str,
    body: str,
    language: str = "",
    desk_text: str = "",
) -> None:
    """Send one message of a run that holds `lease`; `ticket_id` None for mail of no ticket."""
    lease.check()
    claim = f"epoch:{lease.epoch}"
    with effect_lock(key) as lock:
        if not lock.held:
            raise EffectBusy(f"another process is sending {key}")
        # In the claim's transaction: a row "sending" finds the worker inside SMTP, never before.
        with transaction.atomic():
            row = outbox.claim_for_run(
                ticket_id=ticket_id,
                lease=lease,
                key=key,
                to=to,
                subject=subject,
                body=body,
                language=language,
                desk_text=desk_text,
            )
            headers = _headers(key) if row is not None else None
        if row is None or headers is None:
            status, claimed_by = Email.objects.filter(key=key).values_list(
                "status", "claimed_by"
            ).first() or ("", "")
            if status == Email.Status.SENT:
                return
            if not sql.fetchone(f"SELECT 1 WHERE {lease.holds_sql()}", lease.holds_params()):
                raise GraphDrained(
                    f"lease epoch {lease.epoch} of {lease.table} {lease.row_id} lost"
                )
            raise EffectBusy(f"{key} was claimed by {claimed_by} moments ago")
        fence = (lease.holds_sql(), lease.holds_params())
        _deliver(key, outbox.Sender(claim, fence=fence), *row, headers=headers)


def resend(email_id: int) -> bool:
    """An admin's Resend: refused inside a transaction before the claim, leaving the row as is."""
    outside_transaction("the mail server")
    email = Email.objects.select_related("ticket").get(pk=email_id)
    if email.status == Email.Status.SENT:
        return True
    claim = f"resend:{uuid.uuid4().hex[:12]}"
    headers = _headers(email.key)  # before the claim, as send_once reads them
    with effect_lock(email.key) as lock:
        if not lock.held:
            raise EffectBusy(f"another process is sending {email.key}")
        if not outbox.claim_for_resend(email.key, claim, outbox.resendable()):
            return Email.objects.filter(pk=email_id, status=Email.Status.SENT).exists()
        _deliver(
            email.key, outbox.Sender(claim), email.to, email.subject, email.body, headers=headers
        )
    return True


class AnswerLost(smtplib.SMTPServerDisconnected):
    """The message was handed over and no answer came back: it may have been delivered."""


Headers = tuple[dict[str, str], list[str]]  # what the database says: its thread, its Reply-To


def _headers(key: str) -> Headers:
    return thread_headers(key), reply_to(key)


def _deliver(
    key: str, sender: outbox.Sender, to: str, subject: str, body: str, *, headers: Headers
) -> None:
    outside_transaction("the mail server")
    message = EmailMessage(
        header_text(subject),
        body,
        to=[header_text(to)],
        headers={"X-Refund-Key": key, "Message-ID": message_id(key), **headers[0]},
        reply_to=headers[1],
    )
    backend = get_connection()
    try:
        outbox.emit(key, "connect")
        backend.open()
        if isinstance(backend, SmtpBackend):
            if backend.connection is None:  # open() raises instead, unless told to fail silently
                raise smtplib.SMTPServerDisconnected("the SMTP connection did not open")
            _send_smtp(backend.connection, message, key, sender)
        else:  # console, file, locmem, a provider's API: the call itself is the handover
            # Every anymail ESP echoes metadata back in its tracking events.
            message.metadata = {METADATA_KEY: key}  # type: ignore[attr-defined]
            outbox.hand_over(key, sender)
            outbox.emit(key, "handing_over")
            try:
                backend.send_messages([message])
            except Exception as exc:
                if outbox.answered(exc) or not isinstance(outbox.classify(exc), MailRetryable):
                    raise  # and a bug is not the server's
                lost = outbox.classify(exc) if isinstance(exc, AnymailAPIError) else repr(exc)
                raise AnswerLost(f"no answer after the message was handed over: {lost}") from exc
            outbox.emit(key, "handed_over")
            outbox.emit(key, "accepted")
            outbox.record_sent(key, sender)
            outbox.record_provider_id(key, message)
    except Exception as exc:
        backend_close(backend)
        error = outbox.classify(exc)
        if error is None:
            raise
        metrics.MAIL_FAILURES.labels(
            kind="refused" if isinstance(error, MailRefused) else "retryable"
        ).inc()
        # The claim is given back; after a lost answer the retry may deliver a second copy.
        unknown = (
            outbox.unknown_fields()
            if isinstance(exc, AnswerLost)
            else {"handed_over_at": None, "handed_over_by": ""}
        )
        outbox.write(
            Email.objects.filter(key=key, claimed_by=sender.claim).exclude(
                status=Email.Status.SENT
            ),
            status=Email.Status.PENDING,
            claimed_by="",
            claimed_at=None,
            last_error=str(error)[:2000],
            **unknown,
        )
        raise error from exc
    backend_close(backend)


def _send_smtp(conn: smtplib.SMTP, message: EmailMessage, key: str, sender: outbox.Sender) -> None:
    """smtplib's sendmail, with "handed over" committed before the final "." and "sent" after."""
    encoding = message.encoding or settings.DEFAULT_CHARSET
    from_address = sanitize_address(message.from_email, encoding)
    recipients = [sanitize_address(addr, encoding) for addr in message.recipients()]
    conn.ehlo_or_helo_if_needed()
    code, answer = conn.mail(from_address)
    if code != 250:
        conn.rset()
        raise smtplib.SMTPSenderRefused(code, answer, from_address)
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
    try:
        outbox.hand_over(key, sender)
    except BaseException:
        conn.close()  # mid-DATA: dropping the connection discards the message
        raise
    outbox.emit(key, "handing_over")
    # From here until the answer is recorded is the one window of mail once (module docstring).
    conn.send(b".\r\n")
    outbox.emit(key, "handed_over")
    try:
        code, answer = conn.getreply()
    except smtplib.SMTPServerDisconnected as exc:
        raise AnswerLost(f"no answer to the end of the message: {exc}") from exc
    if code != 250:
        raise smtplib.SMTPDataError(code, answer)
    outbox.emit(key, "accepted")
    outbox.record_sent(key, sender)


def backend_close(backend) -> None:
    try:
        backend.close()
    except Exception:  # noqa: BLE001 - the message went out (or not) before; QUIT is courtesy
        log.debug("closing the mail connection failed", exc_info=True)


def header_text(text: str) -> str:
    """A header from a customer's words on one line: a CR or LF would start a header of their
    choosing (`Late\r\nBcc: ...`), or make Django refuse the message on every attempt."""
    return " ".join(text.split())


# The customer's Message-IDs an outbox row answers; the intake registers it (refunds imports none).
CUSTOMER_MESSAGE_IDS: list[Callable[[Email], list[str]]] = []


def thread_headers(key: str) -> dict[str, str]:
    """In-Reply-To and References, so the customer's mail client shows one conversation."""
    email = Email.objects.filter(key=key).first()
    if email is None:
        return {}
    theirs = [found for lookup in CUSTOMER_MESSAGE_IDS for found in lookup(email)]
    ours: list[str] = []
    if email.ticket_id is not None:
        earlier = Email.objects.filter(ticket_id=email.ticket_id, pk__lt=email.pk).order_by("pk")
        ours = [message_id(k) for k in earlier.values_list("key", flat=True)]
    chain = list(dict.fromkeys(theirs + ours))
    if not chain:
        return {}
    return {"In-Reply-To": (theirs or ours)[-1], "References": " ".join(chain)}


TOKEN_PLACE = "{token}"


def reply_address(token: str) -> str:
    """The address a reply to a question goes to: REFUNDS_REPLY_ADDRESS with its token."""
    return settings.REFUNDS_REPLY_ADDRESS.replace(TOKEN_PLACE, token)


def reply_to(key: str) -> list[str]:
    """A question's token, so the reply finds its thread whatever the subject becomes."""
    # A reminder and the close for want of a reply carry their question's token.
    asked = key.removesuffix(":reminder").removesuffix(CLOSED_SUFFIX)
    token = CustomerQuestion.objects.filter(email_key=asked).values_list("token", flat=True).first()
    # An offer of store credit's: a reply that says which is the choice (services/credit.py).
    token = (
        token or CreditOffer.objects.filter(email_key=key).values_list("token", flat=True).first()
    )
    return [reply_address(token)] if token else []


def message_id(key: str) -> str:
    """The same on every attempt; keyed by the secret, so a forged reply cannot name it."""
    return f"<{salted_hmac('refund-desk.message-id', key).hexdigest()[:32]}@refund-desk>"
