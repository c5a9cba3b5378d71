"""A reply to a reviewer's question resumes its ticket's thread instead of opening a ticket."""

from __future__ import annotations

from collections.abc import Iterable

from django.utils import timezone

from intake.models import Message, MessageTicket
from refunds.services import asking


def reply_place(message: Message, *, recipients: Iterable[str], references: Iterable[str]) -> bool:
    """Place a new message that answers a question; False when it answers none."""
    found = asking.question_for(
        recipients=recipients, references=references, brought_by=message.brought_by
    )
    if not found.claims_a_question:
        return False
    now = timezone.now()
    done = Message.objects.filter(pk=message.pk)
    if found.question is None:
        done.update(
            status=Message.Status.NEEDS_SORTING,
            sorting_reason=f"A reply to a question, but {found.why}.",
            finished_at=now,
            updated_at=now,
        )
        return True
    ticket = found.question.ticket
    replied = asking.reply_record(
        question=found.question,
        sender=message.sender,
        text=message.body,
        seen={"message": message.pk},
    )
    done.update(
        status=Message.Status.ADDED,
        ticket=ticket,
        answers_question=found.question,
        sorting_reason="" if replied.why == "" else f"A reply that resumed nothing: {replied.why}.",
        resumed_wait=replied.resumed or replied.kept,
        finished_at=now,
        updated_at=now,
    )
    MessageTicket.objects.create(message=message, ticket=ticket, orders=[], added=True)
    return True
