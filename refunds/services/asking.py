"""Asking the customer: a reviewer's question (recorded by ticket_decide as a Decision "ask",
with its reply token here), the reply address that carries the token, and the customer's reply
recorded as the wait's Decision ("reply"), so the runner resumes the thread as it applies any
recorded answer: once, under the lease (DESIGN.md invariants 4 and 5)."""

from __future__ import annotations

import secrets
from collections.abc import Iterable
from dataclasses import dataclass

from django.conf import settings
from django.db import IntegrityError, transaction
from django.utils import timezone

from refunds import audit, enqueue, mail
from refunds.flow.nodes.asking import ask_key
from refunds.models import AuditEvent, CannedReason, CustomerQuestion, Decision, Ticket
from refunds.services.errors import RefundError

QUESTION_MAX = 2000
REPLY_MAX = 20_000  # of a reply's text, into the thread; the whole message stays on the desk


def question_words(
    text: str, canned: CannedReason | None, *, amount_cents: int | None, orders: object
) -> str:
    """The question as the customer reads it: a canned question, the reviewer's own words, or
    both. RefundError for an ask that carries what only an approval does."""
    if amount_cents is not None or orders:
        raise RefundError("A question to the customer carries no amount or per-order answers.")
    if canned is not None and canned.use != CannedReason.Use.ASK:
        raise RefundError(f"“{canned.title}” is not a question to the customer.")
    words = f"{canned.text} {text}".strip() if canned is not None else text.strip()
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
    """The token of the first address that is a reply address (REFUNDS_REPLY_ADDRESS with any
    token in its place), whether or not a question has it; None when none is."""
    prefix, suffix = settings.REFUNDS_REPLY_ADDRESS.lower().split(mail.TOKEN_PLACE)
    for address in addresses:
        address = (address or "").strip().lower()
        if (
            len(address) > len(prefix) + len(suffix)
            and address.startswith(prefix)
            and address.endswith(suffix)
        ):
            return address[len(prefix) : len(address) - len(suffix)]
    return None


@dataclass(frozen=True)
class Found:
    """What a message's addresses and headers say about the question it answers: the question
    (None when none matched), and why a message that claims to answer one matches none."""

    question: CustomerQuestion | None
    why: str = ""

    @property
    def claims_a_question(self) -> bool:
        return self.question is not None or bool(self.why)


def question_for(*, recipients: Iterable[str], references: Iterable[str]) -> Found:
    """The question a message answers: by the token in a recipient (the reply address), else by
    its In-Reply-To/References naming the question email's Message-ID. A token that matches no
    question is forged or mistyped: it matches nothing, and says so."""
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
    if ids:
        found = (
            CustomerQuestion.objects.filter(message_id__in=ids)
            .select_related("ticket__order")
            .order_by("-pk")
            .first()
        )
        if found is not None:
            return Found(found)
    return Found(None)


@dataclass(frozen=True)
class Replied:
    resumed: bool
    why: str = ""  # why it resumed nothing
    decision: Decision | None = None


def reply_record(
    *, question: CustomerQuestion, sender: str, text: str, seen: dict | None = None
) -> Replied:
    """Record the customer's reply as the answer to the thread's wait, and wake a worker to
    resume it; or, when the reply may not resume it (another sender, a question no longer
    waited on, answered already), say why on the ticket's timeline and change nothing else.
    Of two replies at once, the compare-and-set on the question's `replied_at` lets one in."""
    ticket = question.ticket
    customer = ticket.order.customer_email
    why = ""
    if sender.strip().lower() != customer.strip().lower():
        why = f"it came from {sender[:200]}, not from the customer's address {customer}"
    else:
        why = _not_waiting(question)
    now = timezone.now()
    about = (seen or {}) | {"question": question.pk}
    if not why:
        try:
            with transaction.atomic():
                decision = _record(question, text, about, now)
        except _NotRecorded as exc:
            why = str(exc)
        else:
            return Replied(True, decision=decision)
    audit.record(
        ticket,
        AuditEvent.Action.REPLY,
        seen=about,
        answer={"resumed": False, "why": why},
        note=text[:300],
    )
    return Replied(False, why)


class _NotRecorded(Exception):
    pass


def _record(question: CustomerQuestion, text: str, seen: dict, now) -> Decision:
    ticket = question.ticket
    # The late guards, on the rows and not on the caller's copies: the ticket waits on this very
    # question now (the thread may have moved on since the early check), and one conditional
    # UPDATE takes the question for this reply, so a second reply finds it taken.
    row = (
        Ticket.objects.filter(pk=ticket.pk, status=Ticket.Status.AWAITING_CUSTOMER)
        .values("pending_interrupt_id", "pending_payload")
        .first()
    )
    payload = row["pending_payload"] if row and isinstance(row["pending_payload"], dict) else {}
    if row is None or payload.get("ask_id") != question.decision_id:
        raise _NotRecorded("the ticket no longer waits on this question")
    pending = row["pending_interrupt_id"]
    taken = CustomerQuestion.objects.filter(pk=question.pk, replied_at__isnull=True).update(
        replied_at=now
    )
    if not taken:
        raise _NotRecorded("the question was answered already; this reply is kept here")
    try:
        with transaction.atomic():
            decision = Decision.objects.create(
                ticket=ticket,
                interrupt_id=pending,
                reviewer=None,
                answer=Decision.Answer.REPLY,
                reason=text[:REPLY_MAX],
            )
    except IntegrityError:  # the UNIQUE interrupt id, behind the compare-and-set
        raise _NotRecorded("the thread's wait has its answer already") from None
    CustomerQuestion.objects.filter(pk=question.pk).update(reply=decision)
    audit.record(
        ticket,
        AuditEvent.Action.REPLY,
        seen=seen | {"interrupt_id": pending},
        answer={"resumed": True},
        note=text[:300],
    )
    enqueue.advance_on_commit(ticket.pk)
    return decision


def _not_waiting(question: CustomerQuestion) -> str:
    """Why the thread does not wait on this question now ("" when it does)."""
    row = Ticket.objects.filter(pk=question.ticket_id).values("status", "pending_payload").first()
    if row is None:
        return "its ticket is gone"
    payload = row["pending_payload"] if isinstance(row["pending_payload"], dict) else {}
    if question.replied_at is not None:
        return "the question was answered already; this reply is kept here"
    if row["status"] != Ticket.Status.AWAITING_CUSTOMER or payload.get("ask_id") != (
        question.decision_id
    ):
        status = Ticket.Status(row["status"]).label.lower()
        return f"the ticket no longer waits on this question (it is {status})"
    return ""
