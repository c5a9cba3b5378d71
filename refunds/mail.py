"""Customer email through Django's mail framework, once, through the outbox table.

send_once(), for a run that holds the thread's lease:
1. Take the effect lock for the key (refunds/locks.py): nothing is claimed without it (a process
   paused mid-send keeps it, so its successor waits instead of sending a second copy). Write the
   outbox row if it is not there and claim it, in one statement: status "sending", claimed by
   this lease epoch, only while that epoch holds the ticket. A worker that
   lost its epoch never sends.
3. Talk to the mail server (EMAIL_TIMEOUT bounds every step of the conversation). Just before
   the final "." the row is marked "handed over" (when, by whom) in one committed statement, only
   while the row is still this sender's claim and, for a run, its epoch still holds the ticket:
   otherwise the connection is dropped mid-message and the server discards it. After the
   server's answer the row is marked "sent" in another committed statement, again only while the
   claim is ours, and the effect lock is given back. No transaction is open while we wait for
   the server: on SQLite an open write transaction holds the whole database (every lease
   renewal on the machine would wait with it).
4. If the database went away, the mark is written again on a fresh connection.

What "once" means, exactly: a second copy is possible only when the sender stopped (killed, or
stalled longer than the send window) between handing over the final "." and recording the
server's answer, or when that answer never reached it (the connection dropped or EMAIL_TIMEOUT
passed after the final "."). The next sender that claims the row finds the "handed over" mark
with no answer, records "outcome unknown" (when it was handed over, by which epoch and worker)
and sends again, with the same Message-ID, so a mail system that de-duplicates can tell. No SMTP
server lets us close this window (it takes no idempotency key); tests/test_crash.py pins it.

On PostgreSQL a claim younger than the send window (the longest a live sender can still be
talking to the server) is left alone even when its lock is free: a database blip drops the
advisory lock while its holder may still be sending.
"""

from __future__ import annotations

import logging
import os
import re
import smtplib
import socket
import time
import uuid
from collections.abc import Callable
from dataclasses import dataclass
from datetime import timedelta
from typing import Any

from anymail.exceptions import AnymailAPIError, AnymailRecipientsRefused
from django.conf import settings
from django.core.mail import EmailMessage, get_connection
from django.core.mail.backends.smtp import EmailBackend as SmtpBackend
from django.core.mail.message import sanitize_address
from django.db import InterfaceError, OperationalError, connection, transaction
from django.db.models import Case, Exists, F, OuterRef, Q, Value, When
from django.db.models.functions import Coalesce, Concat
from django.utils.crypto import salted_hmac
from langgraph.errors import GraphDrained

from core import outbox, sql
from core.network import outside_transaction
from refunds import emails, metrics, queries, signals
from refunds.flow.errors import EffectBusy, MailRefused, MailRetryable
from refunds.flow.nodes.asking import CLOSED_SUFFIX
from refunds.lease import Lease
from refunds.locks import effect_lock
from refunds.mail_tracking import METADATA_KEY
from refunds.models import CustomerQuestion, Email, Ticket

log = logging.getLogger(__name__)


def send_window() -> timedelta:
    """How long a live sender may still be inside one SMTP conversation, though its effect lock
    is free. On SQLite (one machine, a kernel file lock) a free lock means its holder is gone."""
    if connection.vendor == "sqlite":
        return timedelta(0)
    return timedelta(seconds=2 * settings.EMAIL_TIMEOUT + 1)


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
    """send_once of one kind of email, worded from its facts in the customer's language
    (refunds/emails.py). The outbox keeps the words of the first attempt: a retry sends those."""
    worded = emails.word(kind, facts, language)
    send_once(
        ticket_id=ticket_id,
        lease=lease,
        key=key,
        to=to,
        subject=worded.subject,
        body=worded.body,
        language=worded.language,
        desk_text=worded.desk_text,
    )


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
    """Send one message of a run that holds `lease` (a ticket's, or another row's such as an
    intake message's: the fence is the lease's own row). `ticket_id` is the ticket the outbox
    row belongs to; None for mail about no ticket (an acknowledgment that opened none)."""
    lease.check()
    claim = f"epoch:{lease.epoch}"
    with effect_lock(key) as lock:
        if not lock.held:
            raise EffectBusy(f"another process is sending {key}")
        # What the headers need from the database (the row's thread, its Reply-To) is read in the
        # claim's transaction: once the row shows "sending", a lost connection finds the worker
        # inside the SMTP conversation (whose handover mark takes a fresh connection), never
        # before it with the claim held and nothing sent.
        with transaction.atomic():
            row = _claim_for_run(
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
        _deliver(key, Sender(claim, fence=fence), *row, headers=headers)


# A takeover of a row whose handover has no answer recorded keeps what is known: the message was
# handed over then, by that sender, and may have been delivered.
_UNKNOWN_SQL = (
    "outcome_unknown_at = "
    "COALESCE(refunds_email.handed_over_at, refunds_email.outcome_unknown_at), "
    "outcome_unknown_by = CASE WHEN refunds_email.handed_over_at IS NULL "
    "THEN refunds_email.outcome_unknown_by ELSE refunds_email.handed_over_by END, "
    "handed_over_at = NULL, handed_over_by = ''"
)


def _unknown_fields() -> dict:
    """_UNKNOWN_SQL for the ORM."""
    return {
        "outcome_unknown_at": Coalesce(F("handed_over_at"), F("outcome_unknown_at")),
        "outcome_unknown_by": Case(
            When(handed_over_at__isnull=True, then=F("outcome_unknown_by")),
            default=F("handed_over_by"),
        ),
        "handed_over_at": None,
        "handed_over_by": "",
    }


def _claim_for_run(
    *,
    ticket_id: int | None,
    lease: Lease,
    key: str,
    to: str,
    subject: str,
    body: str,
    language: str = "",
    desk_text: str = "",
) -> tuple[str, str, str] | None:
    """Write the outbox row if it is not there and claim it for this epoch, in one statement:
    only while the epoch holds the lease's row, and only if nobody sent the message, nobody else
    is (or may still be) sending it. Returns the row's (to, subject, body) when it is ours."""
    claim = f"epoch:{lease.epoch}"
    holds = lease.holds_sql()
    row = sql.fetchone(
        'INSERT INTO refunds_email (ticket_id, "key", "to", subject, body, status, claimed_by, '
        "claimed_at, attempts, last_error, created_at, handed_over_by, outcome_unknown_by, "
        "language, desk_text) "
        f"SELECT %s, %s, %s, %s, %s, {queries.EMAIL_SENDING}, %s, {sql.now()}, 1, '', "
        f"{sql.now()}, '', '', %s, %s "
        f"WHERE {holds} "
        f'ON CONFLICT ("key") DO UPDATE SET status = {queries.EMAIL_SENDING}, '
        "claimed_by = excluded.claimed_by, claimed_at = excluded.claimed_at, "
        f"attempts = refunds_email.attempts + 1, {_UNKNOWN_SQL} "
        f"WHERE refunds_email.status <> {queries.EMAIL_SENT} AND (refunds_email.status = "
        f"{queries.EMAIL_PENDING} "
        "OR refunds_email.claimed_by = excluded.claimed_by OR refunds_email.claimed_at IS NULL "
        f"OR refunds_email.claimed_at < {sql.now_minus()}) AND {holds} "
        'RETURNING "to", subject, body',
        [
            *(ticket_id, key, to, subject, body, claim, language, desk_text),
            *lease.holds_params(),
            send_window().total_seconds(),
            *lease.holds_params(),
        ],
    )
    return (row[0], row[1], row[2]) if row is not None else None


@dataclass(frozen=True)
class OtherRun:
    """Outbox rows that a run other than a ticket's sends (the intake's acknowledgments, which
    may name a ticket or none): registered by the app that runs it (intake/apps.py), since
    refunds imports nothing of it. `owns` is a Q on Email naming its rows; `settled` the ones
    whose run is over and will not send them again (a Resend may claim those; the claim is one
    conditional UPDATE, so a run that starts again meanwhile and the Resend still send once);
    `busy` says why one not settled is not resent; `about(emails)` what each row is about for
    the admins' pages ({email id: (words, url)}); `resent(email, by)` records a Resend."""

    owns: Callable[[], Q]
    settled: Callable[[], Q]
    busy: str
    about: Callable[[list[Email]], dict[int, tuple[str, str]]]
    resent: Callable[[Email, Any], None]


OTHER_RUNS: list[OtherRun] = []


def also_sent_by(other: OtherRun) -> None:
    if other not in OTHER_RUNS:
        OTHER_RUNS.append(other)


def owner(email: Email) -> OtherRun | None:
    """The other run that sends this row, if not a ticket's."""
    for other in OTHER_RUNS:
        if Email.objects.filter(other.owns(), pk=email.pk).exists():
            return other
    return None


def resendable() -> Q:
    """Outbox rows no run will send any more: a final ticket's (unless another run owns them),
    or another run's once it settled. Only these appear undelivered and may be resent. The
    email saying a ticket is closed for want of a reply is true only while it is: resendable
    while the ticket is closed on that question and no reply reopened it, never after."""
    q = (Q(ticket__status__in=Ticket.FINAL) & ~Q(key__endswith=CLOSED_SUFFIX)) | still_closed()
    for other in OTHER_RUNS:
        q = (q & ~other.owns()) | other.settled()
    return q


def still_closed() -> Q:
    """Close emails whose ticket is still closed on their question: the ticket's status says
    closed and the question's `reopened_at` is unset. A reply records `reopened_at` before a
    worker reopens the ticket, so the status alone would let a Resend through meanwhile."""
    closed_on = (
        CustomerQuestion.objects.filter(ticket=OuterRef("ticket"), reopened_at__isnull=True)
        .annotate(closed_key=Concat(F("email_key"), Value(CLOSED_SUFFIX)))
        .filter(closed_key=OuterRef("key"))
    )
    return Q(ticket__status=Ticket.Status.CLOSED) & Q(Exists(closed_on))


def about(emails: list[Email]) -> dict[int, tuple[str, str]]:
    """{email id: (words, url)} for rows another run owns (what the admins' pages link to)."""
    found: dict[int, tuple[str, str]] = {}
    for other in OTHER_RUNS:
        found |= other.about(emails)
    return found


def resend(email_id: int) -> bool:
    """Send an outbox message again outside any run (an admin's Resend): True once delivered
    (now or before). Only rows no run will send concurrently (resendable()). Refused inside a
    transaction before the row is claimed, so a refused Resend leaves the row as it was."""
    outside_transaction("the mail server")
    email = Email.objects.select_related("ticket").get(pk=email_id)
    if email.status == Email.Status.SENT:
        return True
    claim = f"resend:{uuid.uuid4().hex[:12]}"
    headers = _headers(email.key)  # before the claim, as send_once reads them
    with effect_lock(email.key) as lock:
        if not lock.held:
            raise EffectBusy(f"another process is sending {email.key}")
        if not _claim(email.key, claim, resendable()):
            return Email.objects.filter(pk=email_id, status=Email.Status.SENT).exists()
        _deliver(email.key, Sender(claim), email.to, email.subject, email.body, headers=headers)
    return True


def _claim(key: str, claim: str, holds: Q) -> bool:
    """For a Resend: the outbox's claim (core/outbox.py), while our right to send (`holds`)
    stands and nobody sent the row; a takeover keeps what is known of an unanswered handover."""
    return outbox.claim(
        Email.objects.filter(holds, key=key).exclude(status=Email.Status.SENT),
        claim,
        due=Q(status=Email.Status.PENDING) | Q(claimed_by=claim) | Q(claimed_at__isnull=True),
        window=send_window(),  # its sender died (we hold the lock)
        **_unknown_fields(),
    )


@dataclass(frozen=True)
class Sender:
    """Who is sending: the row's claim, and for a run the fence that must still hold when the
    message is handed over (SQL and its params: the lease's epoch on its row)."""

    claim: str
    fence: tuple[str, list] | None = None

    def label(self) -> str:
        return f"{self.claim} on {socket.gethostname()}:{os.getpid()}"


def _emit(key: str, event: str) -> None:
    signals.mail_delivery.send(sender=None, key=key, event=event)


class AnswerLost(smtplib.SMTPServerDisconnected):
    """The message was handed over and no answer came back: it may have been delivered."""


@dataclass(frozen=True)
class Headers:
    """A message's headers that the database says (its thread, its Reply-To)."""

    thread: dict[str, str]
    reply_to: list[str]


def _headers(key: str) -> Headers:
    return Headers(thread_headers(key), reply_to(key))


def _deliver(
    key: str, sender: Sender, to: str, subject: str, body: str, *, headers: Headers
) -> None:
    outside_transaction("the mail server")
    message = EmailMessage(
        header_text(subject),
        body,
        to=[header_text(to)],
        headers={"X-Refund-Key": key, "Message-ID": message_id(key), **headers.thread},
        reply_to=headers.reply_to,
    )
    backend = get_connection()
    try:
        _emit(key, "connect")
        backend.open()
        if isinstance(backend, SmtpBackend):
            if backend.connection is None:  # open() raises instead, unless told to fail silently
                raise smtplib.SMTPServerDisconnected("the SMTP connection did not open")
            _send_smtp(backend.connection, message, key, sender)
        else:  # console, file, locmem, a provider's API: the call itself is the handover
            # Every anymail ESP echoes metadata back in its tracking events
            # (refunds/mail_tracking.py).
            message.metadata = {METADATA_KEY: key}  # type: ignore[attr-defined]
            _hand_over(key, sender)
            _emit(key, "handing_over")
            try:
                backend.send_messages([message])
            except Exception as exc:
                if _answered(exc) or not isinstance(_classify(exc), MailRetryable):
                    raise  # and a bug is not the server's
                lost = _classify(exc) if isinstance(exc, AnymailAPIError) else repr(exc)
                raise AnswerLost(f"no answer after the message was handed over: {lost}") from exc
            _emit(key, "handed_over")
            _emit(key, "accepted")
            _record_sent(key, sender)
            _record_provider_id(key, message)
    except Exception as exc:
        backend_close(backend)
        error = _classify(exc)
        if error is None:
            raise
        metrics.MAIL_FAILURES.labels(
            kind="refused" if isinstance(error, MailRefused) else "retryable"
        ).inc()
        # The claim is given back. A refusal is an answer (nothing was delivered); a lost answer
        # after the handover leaves the outcome unknown, and the retry may deliver a second copy.
        unknown = (
            _unknown_fields()
            if isinstance(exc, AnswerLost)
            else {"handed_over_at": None, "handed_over_by": ""}
        )
        _write(
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


def _send_smtp(conn: smtplib.SMTP, message: EmailMessage, key: str, sender: Sender) -> None:
    """smtplib's sendmail, with the outbox's two marks around the final ".": "handed over"
    committed before it goes out (only while the claim is ours), "sent" committed after the
    server's 250. Nothing waits on the server while a transaction is open."""
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
        _hand_over(key, sender)
    except BaseException:
        conn.close()  # mid-DATA: dropping the connection discards the message
        raise
    _emit(key, "handing_over")
    # From here until the answer is recorded is the one window of mail once (module docstring).
    conn.send(b".\r\n")
    _emit(key, "handed_over")
    try:
        code, answer = conn.getreply()
    except smtplib.SMTPServerDisconnected as exc:
        raise AnswerLost(f"no answer to the end of the message: {exc}") from exc
    if code != 250:
        raise smtplib.SMTPDataError(code, answer)
    _emit(key, "accepted")
    _record_sent(key, sender)


def _hand_over(key: str, sender: Sender) -> None:
    """Mark the row "handed over" before the message is: one committed UPDATE, only while it is
    still this sender's claim and, for a run, while its epoch holds the ticket. A database that
    went away is tried again on a fresh connection (a claim younger than the send window is left
    to its sender, so the row is still ours)."""
    holds = ""
    params: list = [sender.label(), key, sender.claim]
    if sender.fence is not None:
        holds = f" AND {sender.fence[0]}"
        params += sender.fence[1]
    statement = (
        f"UPDATE refunds_email SET handed_over_at = {sql.now()}, handed_over_by = %s "
        f'WHERE "key" = %s AND status = {queries.EMAIL_SENDING} AND claimed_by = %s' + holds
    )
    for attempt in range(5):
        try:
            marked = sql.execute(statement, params)
            break
        except (OperationalError, InterfaceError):
            if attempt == 4 or connection.in_atomic_block:
                raise
            log.warning("outbox: database connection lost before the end of the message")
            connection.close()
            time.sleep(0.2 * (attempt + 1))
    if marked:
        return
    if sender.fence is not None and not sql.fetchone(
        f"SELECT 1 WHERE {sender.fence[0]}", sender.fence[1]
    ):
        raise GraphDrained(f"{sender.claim}: its lease epoch was lost")
    raise EffectBusy(f"{key} is no longer claimed by {sender.claim}")


def _record_sent(key: str, sender: Sender) -> None:
    """The server's 250, recorded: "sent", while the row is still this sender's claim. If a
    successor took the claim over while we waited for the answer (we stalled past the send
    window) but has not handed its own copy over yet, the fact is recorded all the same: its
    handover mark then fails and it drops its copy before the final "."."""
    done = (
        f"status = {queries.EMAIL_SENT}, sent_at = {sql.now()}, last_error = '', "
        "handed_over_at = NULL, handed_over_by = ''"
    )
    if _write_sql(
        f"UPDATE refunds_email SET {done} "
        f'WHERE "key" = %s AND status = {queries.EMAIL_SENDING} AND claimed_by = %s',
        [key, sender.claim],
    ) or _write_sql(
        f"UPDATE refunds_email SET {done} "
        f'WHERE "key" = %s AND status <> {queries.EMAIL_SENT} AND handed_over_at IS NULL',
        [key],
    ):
        _emit(key, "recorded")
        return
    if Email.objects.filter(key=key, status=Email.Status.SENT).exists():
        return  # our mark landed before the connection carrying its answer died
    log.warning(
        "outbox: %s was delivered after its claim %s was taken over and handed over again: "
        "a second copy may follow",
        key,
        sender.claim,
    )


def _answered(exc: Exception) -> bool:
    """Whether a failed send got an answer that says nothing was taken: a refusal is an answer,
    and so is a provider's 4xx; a refused connection took nothing. A timeout, a reset or a
    provider's 5xx after the request went out may have been taken."""
    if isinstance(
        exc,
        smtplib.SMTPResponseException
        | smtplib.SMTPRecipientsRefused
        | ConnectionRefusedError
        | AnymailRecipientsRefused,
    ):
        return True
    status = getattr(exc, "status_code", None)
    if isinstance(exc, AnymailAPIError) and status is not None:
        return status < 500
    cause: BaseException | None = exc
    while cause is not None:  # requests wraps a refused connection several times over
        if isinstance(cause, ConnectionRefusedError):
            return True
        cause = cause.__cause__ or cause.__context__
    return False


def _record_provider_id(key: str, message: EmailMessage) -> None:
    """The provider's own id for what it took (anymail's), so its tracking events find the row
    even where they do not carry our metadata."""
    status = getattr(message, "anymail_status", None)
    provider_id = getattr(status, "message_id", None)
    if provider_id is not None:
        _write(Email.objects.filter(key=key), provider_message_id=str(provider_id)[:255])


def backend_close(backend) -> None:
    try:
        backend.close()
    except Exception:  # noqa: BLE001 - the message went out (or not) before; QUIT is courtesy
        log.debug("closing the mail connection failed", exc_info=True)


def _classify(exc: Exception) -> MailRetryable | MailRefused | None:
    """What an SMTP failure means for the next try; None for a bug, which propagates as it is."""
    provider = _classify_provider(exc)  # before OSError: anymail's HTTP errors are OSErrors too
    if provider is not None:
        return provider
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
    return _classify_provider(exc)


def _classify_provider(exc: Exception) -> MailRetryable | MailRefused | None:
    """A mail provider's answer through anymail: a recipient it refuses or a 4xx (other than
    429) is final; 429, a 5xx or no answer at all is worth another try. Anymail's configuration
    errors (a missing API key, an unsupported feature) are bugs, not answers."""
    if isinstance(exc, AnymailRecipientsRefused):
        return MailRefused(f"the mail provider refused the recipient: {exc}")
    if not isinstance(exc, AnymailAPIError):
        return None
    status = getattr(exc, "status_code", None)
    first = (str(exc).strip().splitlines() or [type(exc).__name__])[0][:300]
    if status is not None and 400 <= status < 500 and status != 429:
        return MailRefused(f"the mail provider refused the message: {status} {first}")
    return MailRetryable(f"the mail provider did not take the message: {first}")


def header_text(text: str) -> str:
    """A header built from a customer's words (a subject "Re: ...", a name) on one line: a CR or
    LF in it would start a header of their choosing (`Late\r\nBcc: ...`), or make Django refuse
    the message on every attempt."""
    return " ".join(text.split())


# Who answers which customer message: for an outbox key, the Message-IDs of the customer's own
# messages it answers (registered by the intake, intake/apps.py: refunds imports nothing of it).
CUSTOMER_MESSAGE_IDS: list[Callable[[Email], list[str]]] = []


def thread_headers(key: str) -> dict[str, str]:
    """In-Reply-To and References, so the customer's mail client shows one conversation: the
    customer's own messages this answers, then the ticket's earlier emails, oldest first. The
    same on every attempt (the earlier rows and the messages do not change)."""
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
    """The Reply-To of an outbox message: a question to the customer's carries its token, so
    the reply finds its thread whatever the subject becomes; others have none. The same on
    every attempt and on a resend."""
    # A reminder and the close for want of a reply carry their question's token.
    asked = key.removesuffix(":reminder").removesuffix(CLOSED_SUFFIX)
    token = CustomerQuestion.objects.filter(email_key=asked).values_list("token", flat=True).first()
    return [reply_address(token)] if token else []


def message_id(key: str) -> str:
    """The same Message-ID on every attempt: a mail system that sees a message twice (the one
    window the outbox cannot close) can tell it is one message. Keyed by the secret, so nobody
    can work a question's id out from its thread id and name it in a forged reply's References
    (the reply address's token is unguessable too)."""
    return f"<{salted_hmac('refund-desk.message-id', key).hexdigest()[:32]}@refund-desk>"


def _write_sql(statement: str, params: list) -> int:
    """_write of one UPDATE in SQL."""
    return _write(None, statement=(statement, params))


def _write(qs, *, statement: tuple[str, list] | None = None, **fields) -> int:
    """An UPDATE that records a fact, the rows it changed: retried on a fresh connection if the
    database dropped ours (a blip after the server accepted the message must not make it look
    unsent)."""
    for attempt in range(10):
        try:
            if statement is not None:
                return sql.execute(*statement)
            return qs.update(**fields)
        except (OperationalError, InterfaceError):
            if attempt == 9 or connection.in_atomic_block:
                raise
            log.warning("outbox: database connection lost; recording again", exc_info=True)
            connection.close()
            time.sleep(0.2 * (attempt + 1))
    return 0
