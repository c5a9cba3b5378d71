"""The outbox's email rows (Email, refunds/models/outbox.py): whose each row is and which a
Resend may take; the claim, the "handed over" mark and the record of the server's answer, each
one committed statement that holds only while the row is still its sender's; what a server's or
a provider's failure means for the row (refused, worth another try, or perhaps delivered).
refunds/mail.py sends through these, once; the claim a Resend shares with the webhooks'
deliveries is core/outbox.py.

On PostgreSQL a claim younger than the send window (the longest a live sender can still be
talking to the server) is left alone even when its lock is free: a database blip drops the
advisory lock while its holder may still be sending.
"""

from __future__ import annotations

import logging
import os
import smtplib
import socket
import time
from collections.abc import Callable
from dataclasses import dataclass
from datetime import timedelta
from typing import Any

from anymail.exceptions import AnymailAPIError, AnymailRecipientsRefused
from django.conf import settings
from django.core.mail import EmailMessage
from django.db import InterfaceError, OperationalError, connection
from django.db.models import Case, Exists, F, OuterRef, Q, Value, When
from django.db.models.functions import Coalesce, Concat
from langgraph.errors import GraphDrained

from core import outbox, sql
from refunds import queries, signals
from refunds.flow.errors import EffectBusy, MailRefused, MailRetryable
from refunds.flow.nodes.asking import CLOSED_SUFFIX
from refunds.lease import Lease
from refunds.models import CustomerQuestion, Email, Ticket

log = logging.getLogger(__name__)


def send_window() -> timedelta:
    """How long a live sender may still be inside one SMTP conversation, though its effect lock
    is free. On SQLite (one machine, a kernel file lock) a free lock means its holder is gone."""
    if connection.vendor == "sqlite":
        return timedelta(0)
    return timedelta(seconds=2 * settings.EMAIL_TIMEOUT + 1)


# A takeover of a row whose handover has no answer recorded keeps what is known: the message was
# handed over then, by that sender, and may have been delivered.
_UNKNOWN_SQL = (
    "outcome_unknown_at = "
    "COALESCE(refunds_email.handed_over_at, refunds_email.outcome_unknown_at), "
    "outcome_unknown_by = CASE WHEN refunds_email.handed_over_at IS NULL "
    "THEN refunds_email.outcome_unknown_by ELSE refunds_email.handed_over_by END, "
    "handed_over_at = NULL, handed_over_by = ''"
)


def unknown_fields() -> dict:
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


def claim_for_run(
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
    is (or may still be) sending it. Returns the row's (to, subject, body) when it is ours.
    The lease check is the SELECT's WHERE: a worker that lost its epoch proposes no row, so
    neither the INSERT nor the ON CONFLICT's UPDATE of a row already there happens."""
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
        f"OR refunds_email.claimed_at < {sql.now_minus()}) "
        'RETURNING "to", subject, body',
        [
            *(ticket_id, key, to, subject, body, claim, language, desk_text),
            *lease.holds_params(),
            send_window().total_seconds(),
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
    about: Callable[[list[Email]], dict[int, tuple[str, str]]]
    busy: str = ""
    resent: Callable[[Email, Any], None] = lambda email, by: None  # the row keeps its attempts


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


ERASED_DOMAIN = "erased.invalid"  # RFC 2606: a domain no mail is ever delivered to


def resendable() -> Q:
    """Outbox rows no run will send any more: a final ticket's (unless another run owns them),
    or another run's once it settled. Only these appear undelivered and may be resent. The
    email saying a ticket is closed for want of a reply is true only while it is: resendable
    while the ticket is closed on that question and no reply reopened it, never after. Nothing
    goes to a customer the desk erased (ops/forgetting.py): it no longer knows where."""
    q = (Q(ticket__status__in=Ticket.FINAL) & ~Q(key__endswith=CLOSED_SUFFIX)) | still_closed()
    for other in OTHER_RUNS:
        q = (q & ~other.owns()) | other.settled()
    return q & ~Q(to__endswith=f"@{ERASED_DOMAIN}")


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


def claim_for_resend(key: str, claim: str, holds: Q) -> bool:
    """For a Resend: the outbox's claim (core/outbox.py), while our right to send (`holds`)
    stands and nobody sent the row; a takeover keeps what is known of an unanswered handover."""
    return outbox.claim(
        Email.objects.filter(holds, key=key).exclude(status=Email.Status.SENT),
        claim,
        due=Q(status=Email.Status.PENDING) | Q(claimed_by=claim) | Q(claimed_at__isnull=True),
        window=send_window(),  # its sender died (we hold the lock)
        **unknown_fields(),
    )


@dataclass(frozen=True)
class Sender:
    """Who is sending: the row's claim, and for a run the fence that must still hold when the
    message is handed over (SQL and its params: the lease's epoch on its row)."""

    claim: str
    fence: tuple[str, list] | None = None

    def label(self) -> str:
        return f"{self.claim} on {socket.gethostname()}:{os.getpid()}"


def emit(key: str, event: str) -> None:
    signals.mail_delivery.send(sender=None, key=key, event=event)


def hand_over(key: str, sender: Sender) -> None:
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


def record_sent(key: str, sender: Sender) -> None:
    """The server's 250, recorded: "sent", while the row is still this sender's claim. If a
    successor took the claim over while we waited for the answer (we stalled past the send
    window) but has not handed its own copy over yet, the fact is recorded all the same: its
    handover mark then fails and it drops its copy before the final "."."""
    done = (
        f"status = {queries.EMAIL_SENT}, sent_at = {sql.now()}, last_error = '', "
        "handed_over_at = NULL, handed_over_by = ''"
    )
    mine = f'WHERE "key" = %s AND status = {queries.EMAIL_SENDING} AND claimed_by = %s'
    unmarked = f'WHERE "key" = %s AND status <> {queries.EMAIL_SENT} AND handed_over_at IS NULL'
    if write(None, statement=(f"UPDATE refunds_email SET {done} {mine}", [key, sender.claim])) or (
        write(None, statement=(f"UPDATE refunds_email SET {done} {unmarked}", [key]))
    ):
        emit(key, "recorded")
        return
    if Email.objects.filter(key=key, status=Email.Status.SENT).exists():
        return  # our mark landed before the connection carrying its answer died
    log.warning(
        "outbox: %s was delivered after its claim %s was taken over and handed over again: "
        "a second copy may follow",
        key,
        sender.claim,
    )


def record_provider_id(key: str, message: EmailMessage) -> None:
    """The provider's own id for what it took (anymail's), so its tracking events find the row
    even where they do not carry our metadata."""
    status = getattr(message, "anymail_status", None)
    provider_id = getattr(status, "message_id", None)
    if provider_id is not None:
        write(Email.objects.filter(key=key), provider_message_id=str(provider_id)[:255])


def answered(exc: Exception) -> bool:
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


def classify(exc: Exception) -> MailRetryable | MailRefused | None:
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


def write(qs, *, statement: tuple[str, list] | None = None, **fields) -> int:
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
