"""A reply to a reviewer's question resumes its ticket's thread instead of opening a ticket."""

from __future__ import annotations

from collections.abc import Iterable

from django.utils import timezone

from intake.models import Message, MessageTicket
from refunds.models import CreditOffer
from refunds.services import RefundError, asking, credit


def reply_place(message: Message, *, recipients: Iterable[str], references: Iterable[str]) -> bool:
    """Place a new message that answers a question; False when it answers none."""
    recipients = list(recipients)
    offer = credit.offer_for(recipients)
    if offer is not None:
        _choice_place(message, offer)
        return True
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


def _choice_place(message: Message, offer: CreditOffer) -> None:
    """A reply to an offer of store credit: its first line's word is the choice; a reply that
    says neither (or not from the customer) waits for a person in Needs sorting."""
    customer = offer.ticket.order.customer_email
    choice = credit.choice_read(message.body)
    why = ""
    if message.sender.strip().lower() != customer.strip().lower():
        why = f"it came from {message.sender[:200]}, not from the customer's address"
    elif choice is None:
        why = "its first line says neither CREDIT nor REFUND"
    else:
        try:
            credit.credit_choose(
                offer=offer, choice=choice, source="reply", seen={"message": message.pk}
            )
        except RefundError as exc:
            why = str(exc)
    now = timezone.now()
    done = Message.objects.filter(pk=message.pk)
    if why:
        reason = f"A reply to the offer of store credit on ticket {offer.ticket_id}, but {why}."
        done.update(
            status=Message.Status.NEEDS_SORTING,
            sorting_reason=reason,
            finished_at=now,
            updated_at=now,
        )
        return
    done.update(
        status=Message.Status.ADDED,
        ticket=offer.ticket,
        resumed_wait=True,
        finished_at=now,
        updated_at=now,
    )
    MessageTicket.objects.create(message=message, ticket=offer.ticket, orders=[], added=True)
