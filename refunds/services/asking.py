"""Asking the customer: the reply is the wait's Decision, applied once under the lease."""

from __future__ import annotations

import logging
import re
import secrets
from collections.abc import Iterable
from dataclasses import dataclass
from datetime import timedelta

from django.conf import settings
from django.db import IntegrityError, transaction
from django.db.models import Exists, F, OuterRef, Q, Value
from django.db.models.functions import Concat
from django.urls import reverse
from django.utils import timezone

from refunds import audit, enqueue, mail, outbox, permissions
from refunds.flow.nodes.asking import ask_key
from refunds.models import AuditEvent, CannedReason, CustomerQuestion, Decision, Email, Ticket
from refunds.services.errors import RefundError
from refunds.services.timers import customer_reminder, reminders_deliver

log = logging.getLogger(__name__)

QUESTION_MAX = 2000
REPLY_MAX = 20_000  # of a reply's text, into the thread; the whole message stays on the desk


def question_words(text: str, canned: CannedReason | None, *, language: str = "") -> str:
    """The question as the customer reads it: a canned one (in their language), words, or both."""
    if canned is not None and canned.use != CannedReason.Use.ASK:
        raise RefundError(f"“{canned.title}” is not a question to the customer.")
    said = (canned.text_in(language) or canned.text) if canned is not None else ""
    words = f"{said} {text}".strip()
    if not words:
        raise RefundError("Write the question, or pick one: the customer is sent it.")
    return words


def asking_record(*, ticket: Ticket, decision: Decision, reviewer) -> CustomerQuestion:
    """The question's row and its token, in the transaction that records the ask."""
    key = ask_key(ticket.thread_id, decision.pk)
    return CustomerQuestion.objects.create(
        ticket=ticket,
        decision=decision,
        token=secrets.token_hex(16),  # 128 bits, lower case: mail systems may fold the case
        text=decision.reason,
        asked_by=reviewer,
        email_key=key,
        message_id=mail.message_id(key),
    )


def token_in(addresses: Iterable[str]) -> str | None:
    """The token of the first reply address (REFUNDS_REPLY_ADDRESS) among these, or None."""
    prefix, suffix = settings.REFUNDS_REPLY_ADDRESS.lower().split(mail.TOKEN_PLACE)
    reply = re.compile(f"{re.escape(prefix)}(.+){re.escape(suffix)}", re.DOTALL)
    for address in addresses:
        if found := reply.fullmatch((address or "").strip().lower()):
            return found[1]
    return None


@dataclass(frozen=True)
class Found:
    """The question a message answers (None when none matched), and why a claimed one did not."""

    question: CustomerQuestion | None
    why: str = ""

    @property
    def claims_a_question(self) -> bool:
        return self.question is not None or bool(self.why)


def question_for(*, recipients: Iterable[str], references: Iterable[str], brought_by=None) -> Found:
    """The question a message answers; none on a ticket `brought_by` may not see (as the API)."""
    found = _question_for(recipients=recipients, references=references)
    if found.question is None or brought_by is None:
        return found
    if permissions.can_view(brought_by, found.question.ticket):
        return found
    return Found(None, f"it was handed in by {brought_by}, who may not see its question's ticket")


def _question_for(*, recipients: Iterable[str], references: Iterable[str]) -> Found:
    token = token_in(recipients)
    if token is not None:
        found = CustomerQuestion.objects.filter(token=token).select_related("ticket__order").first()
        if found is None:
            return Found(
                None,
                "its reply address carries a token that matches no question the desk asked "
                "(forged or mistyped)",
            )
        return Found(found)
    ids = [one for one in references if one]
    asked = CustomerQuestion.objects.filter(message_id__in=ids).select_related("ticket__order")
    return Found(asked.order_by("-pk").first() if ids else None)


@dataclass(frozen=True)
class Replied:
    resumed: bool
    why: str = ""  # why it resumed nothing
    kept: bool = False  # it came before the thread waited: it resumes the wait once it does


def reply_record(
    *, question: CustomerQuestion, sender: str, text: str, seen: dict | None = None
) -> Replied:
    """The reply as the wait's answer, or why not; of two at once the CAS on `replied_at` wins."""
    ticket = question.ticket
    customer = ticket.order.customer_email
    text = text.strip()  # an email's body ends in a newline; the quotes of it should not
    if sender.strip().lower() != customer.strip().lower():
        why = f"it came from {sender[:200]}, not from the customer's address {customer}"
    else:
        why = _not_waiting(question, closed_too=True)
    about = (seen or {}) | {"question": question.pk}
    if why == _ON_ITS_WAY:
        if _kept(question, text, about):
            return Replied(False, kept=True)
        why = _ANSWERED  # a reply to it is kept already
    if not why and _kept_applied(question):  # the first reply answers, as below
        why = _ANSWERED
    if not why:
        try:
            with transaction.atomic():
                _record(question, text, about, timezone.now())
        except _NotRecorded as exc:
            why = str(exc)
        else:
            return Replied(True)
    audit.record(
        ticket,
        AuditEvent.Action.REPLY,
        seen=about,
        answer={"resumed": False, "why": why},
        note=text[:300],
    )
    return Replied(False, why)


def _kept(question: CustomerQuestion, text: str, seen: dict) -> bool:
    """Keep, once, a reply that came before its question's wait (race replies_kept_apply ends)."""
    return bool(
        CustomerQuestion.objects.filter(
            pk=question.pk, replied_at__isnull=True, early_reply__isnull=True
        ).update(early_reply={"text": text, "seen": seen})
    )


def replies_kept_apply() -> list[int]:
    """The sweep's: apply each kept reply now waited on, once (the CAS on `replied_at`)."""
    kept = CustomerQuestion.objects.filter(
        early_reply__isnull=False,
        replied_at__isnull=True,
        ticket__status=Ticket.Status.AWAITING_CUSTOMER,
    ).select_related("ticket")
    return [question.ticket_id for question in kept if _kept_applied(question)]


def _kept_applied(question: CustomerQuestion) -> bool:
    """Record the question's kept reply as the wait's answer; False when none or not waited on."""
    reply = question.early_reply
    if not isinstance(reply, dict):
        return False
    try:
        with transaction.atomic():
            _record(question, reply["text"], reply["seen"] | {"kept": True}, timezone.now())
    except _NotRecorded:
        return False
    return True


class _NotRecorded(Exception):
    pass


def _record(
    question: CustomerQuestion, text: str, seen: dict, now, *, answer: str = Decision.Answer.REPLY
) -> Decision:
    ticket = question.ticket
    # The race: late guards on the rows, not the caller's copies; one conditional UPDATE takes
    # the question, so a second reply finds it taken (a closed ticket: one reopens it).
    row = (
        Ticket.objects.filter(
            pk=ticket.pk, status__in=[Ticket.Status.AWAITING_CUSTOMER, Ticket.Status.CLOSED]
        )
        .values("status", "pending_interrupt_id", "pending_payload")
        .first()
    )
    payload = row["pending_payload"] if row and isinstance(row["pending_payload"], dict) else {}
    if row is None or payload.get("ask_id") != question.decision_id:
        raise _NotRecorded("the ticket no longer waits on this question")
    pending = row["pending_interrupt_id"]
    reopens = row["status"] == Ticket.Status.CLOSED
    if reopens and answer != Decision.Answer.REPLY:
        raise _NotRecorded("the ticket is closed for want of a reply already")
    question_row = CustomerQuestion.objects.filter(pk=question.pk)
    if reopens:
        taken = question_row.filter(reopened_at__isnull=True).update(reopened_at=now)
    else:
        taken = question_row.filter(replied_at__isnull=True).update(replied_at=now)
    if not taken:
        raise _NotRecorded(_ANSWERED)
    try:
        with transaction.atomic():
            decision = Decision.objects.create(
                ticket=ticket,
                interrupt_id=pending,
                reviewer=None,
                answer=answer,
                reason=text[:REPLY_MAX],
            )
    except IntegrityError:  # the UNIQUE interrupt id, behind the compare-and-set
        raise _NotRecorded("the thread's wait has its answer already") from None
    question_row.update(reply=decision)
    said: dict = {"resumed": True, "no_reply": answer == Decision.Answer.NO_REPLY}
    if answer == Decision.Answer.NO_REPLY:  # what the thread does with it (the setting)
        said["outcome"] = settings.REFUNDS_ASK_DEFAULT_OUTCOME
    if reopens:
        said["reopened"] = True
    audit.record(
        ticket,
        AuditEvent.Action.REPLY,
        seen=seen | {"interrupt_id": pending},
        answer=said,
        note=text[:300],
    )
    enqueue.advance_on_commit(ticket.pk)
    return decision


_ANSWERED = "the question was answered already; this reply is kept here"


def _not_waiting(question: CustomerQuestion, *, closed_too: bool = False) -> str:
    """Why the thread does not wait on this question ("" when it does)."""
    row = Ticket.objects.filter(pk=question.ticket_id).values("status", "pending_payload").first()
    if row is None:
        return "its ticket is gone"
    payload = row["pending_payload"] if isinstance(row["pending_payload"], dict) else {}
    if (
        closed_too
        and row["status"] == Ticket.Status.CLOSED
        and payload.get("ask_id") == question.decision_id
    ):
        return _ANSWERED if question.reopened_at is not None else ""
    if question.replied_at is not None:
        return _ANSWERED
    if row["status"] == Ticket.Status.RUNNING:
        return _ON_ITS_WAY
    if row["status"] != Ticket.Status.AWAITING_CUSTOMER or payload.get("ask_id") != (
        question.decision_id
    ):
        status = Ticket.Status(row["status"]).label.lower()
        return f"the ticket no longer waits on this question (it is {status})"
    return ""


# An unanswered question of a running thread: the run that sent it has not reached its wait.
_ON_ITS_WAY = "the ticket does not wait on this question yet (it is running)"


def questions_wait_timers(*, now=None) -> dict[str, list[int]]:
    """The customer-wait timers (a reminder, then "no reply"). Conditional UPDATEs: two beats at
    once remind once, and of a reply and the give-up at once one wins."""
    now = now or timezone.now()
    waiting = CustomerQuestion.objects.filter(
        replied_at__isnull=True, ticket__status=Ticket.Status.AWAITING_CUSTOMER
    ).select_related("ticket__order", "decision")
    give_up = now - timedelta(days=settings.REFUNDS_ASK_GIVE_UP_DAYS)
    remind = now - timedelta(days=settings.REFUNDS_ASK_REMIND_DAYS)
    ended, reminded = [], []
    for question in waiting.filter(asked_at__lte=give_up):
        try:
            with transaction.atomic():
                _record(question, "", {"by": "timer"}, now, answer=Decision.Answer.NO_REPLY)
        except _NotRecorded as exc:
            log.info("question %s: no give-up: %s", question.pk, exc)
        else:
            ended.append(question.ticket_id)
    for question in waiting.filter(asked_at__lte=remind, asked_at__gt=give_up, reminded_at=None):
        with transaction.atomic():
            if _reminder_written(question, now):
                reminded.append(question.ticket_id)
    reminders_deliver(_reminders())
    return {"ended": ended, "reminded": reminded}


def _reminder_written(question: CustomerQuestion, now) -> bool:
    """Mark the question reminded and put its reminder in the outbox, in one transaction."""
    if _not_waiting(question):
        return False
    if not CustomerQuestion.objects.filter(pk=question.pk, reminded_at=None).update(
        reminded_at=now
    ):
        return False
    ticket = question.ticket
    key = question.email_key + REMINDER_SUFFIX
    customer_reminder(ticket, key, "question", {"question": question.text})
    audit.record(
        ticket,
        AuditEvent.Action.ASK,
        seen={"question": question.pk},
        answer={"reminder": True, "question": question.text},
    )
    return True


# Customers' reminders: no run sends them; the timer or a Resend claims each (conditionally).
REMINDER_SUFFIX = ":reminder"


def _reminders() -> Q:
    return Q(key__contains=":ask:", key__endswith=REMINDER_SUFFIX)


def _reminders_still_true() -> Q:
    """Reminders whose question still waits: after, "we have not heard from you" is untrue."""
    waiting = (
        CustomerQuestion.objects.filter(
            replied_at__isnull=True, ticket__status=Ticket.Status.AWAITING_CUSTOMER
        )
        .annotate(reminder_key=Concat(F("email_key"), Value(REMINDER_SUFFIX)))
        .filter(reminder_key=OuterRef("key"))
    )
    return _reminders() & Q(Exists(waiting))


def _about(found: list[Email]) -> dict[int, tuple[str, str]]:
    return {
        e.pk: (
            f"Reminder to the customer: {e.subject}",
            reverse("reviews:ticket", args=[e.ticket_id]),
        )
        for e in found
        if e.ticket_id and e.key.endswith(REMINDER_SUFFIX) and ":ask:" in e.key
    }


QUESTION_REMINDERS = outbox.OtherRun(
    owns=_reminders,
    settled=_reminders_still_true,
    busy=(
        "That reminder says the customer has not answered yet, and it is not true any more: "
        "they replied, or the wait on the question ended."
    ),
    about=_about,
)
