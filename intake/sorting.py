"""What a person does with a message the intake could not place, or placed wrongly. Each action is
one compare-and-set UPDATE on the message's status, in the transaction of all it writes: of two
agents (or a double submit) one wins, the other is told who did."""

from __future__ import annotations

from typing import Any

from django.db import transaction
from django.utils import timezone

from core.clock import local_words
from intake.models import REPLY_PREFIX, Message, MessageEvent, MessageTicket
from intake.placing import Placed, link, open_or_add
from intake.services import message_problems
from refunds import audit, emails, enqueue, permissions, policy
from refunds.flow.words import numbers_words
from refunds.models import (
    AuditEvent,
    CannedReason,
    Email,
    Order,
    Ticket,
    order_number_read,
    same_customer,
)
from refunds.services import (
    NOTE_MAX,
    RefundError,
    order_find,
    review_answers,
    ticket_decide,
)

ORDERS_MAX = 10  # one message names a few orders; more is a paste gone wrong
# Ends a misread ticket's review on the desk only: the message's next ticket answers the customer.
SENT_BACK_REASON = "The message was misread; it went back to Needs sorting."


class SortingError(RefundError):
    """Bad input or a message that moved on; the message is shown to the person as it is."""


def placed_words(where: Placed) -> str:
    """What a sort did, for the person who sorted."""
    parts = []
    if where.opened is not None:
        parts.append(f"Opened ticket {where.opened.pk} for {numbers_words(where.opened_orders)}")
    if where.added:
        parts.append(
            "Added the message to "
            + ", ".join(f"the open ticket {t.pk} of {numbers_words(n)}" for t, n in where.added)
            + " (an order has one open ticket)"
        )
    return "; ".join(parts) + "."


def _orders(numbers: list[str]) -> list[Order]:
    try:
        picked = list(dict.fromkeys(order_number_read(n) for n in numbers if n.strip("# ")))
    except ValueError as exc:
        raise SortingError(str(exc)) from None
    if not picked:
        raise SortingError("Pick at least one order (tick one, or type its number).")
    if len(picked) > ORDERS_MAX:
        raise SortingError(f"At most {ORDERS_MAX} orders at once; this has {len(picked)}.")
    # Outside any transaction: it may ask the shop.
    found = {n: order_find(order_number=n) for n in picked}
    if unknown := [n for n, o in found.items() if o is None]:
        raise SortingError(
            f"There is no order {', '.join(unknown)}; nothing was opened. Check the number."
        )
    return [o for o in found.values() if o is not None]


def _handled(message: Message, by, was: str, to: str, **fields: Any) -> bool:
    """A person moves the message from `was` to `to`: of two at once, one wins."""
    now = timezone.now()
    mine = Message.objects.filter(pk=message.pk, status=was)
    return bool(mine.update(status=to, handled_by=by, handled_at=now, updated_at=now, **fields))


def _taken(message: Message) -> SortingError:
    fresh = Message.objects.select_related("handled_by").get(pk=message.pk)
    who = f" by {fresh.handled_by.username}" if fresh.handled_by else ""
    when = f" at {local_words(fresh.handled_at)}" if fresh.handled_at else ""
    return SortingError(
        f"This message was already sorted{who}{when}: it is "
        f"{fresh.get_status_display().lower()}. Nothing was changed."
    )


def message_sort(
    *,
    message: Message,
    order_numbers: list[str],
    reason: str,
    by,
    other_customer_ok: bool = False,
) -> Placed:
    """Open or add to tickets for the orders a person chose; `other_customer_ok`: a forward."""
    permissions.deny(permissions.sort_refusal(by))
    if reason not in policy.TICKET_REASONS:
        words = policy.REASONS.get(reason)
        raise SortingError(
            f"{words} is not a reason a ticket is opened for; mark it not a refund request."
            if words
            else "Choose the reason the customer asks."
        )
    if message.status != Message.Status.NEEDS_SORTING:
        raise _taken(message)
    orders = _orders(order_numbers)
    others = [o for o in orders if not same_customer(o.customer_email, message.sender)]
    if others and not other_customer_ok:
        o = others[0]
        raise SortingError(
            f"Order {o.number} belongs to {o.customer_name} ({o.customer_email}), not to the "
            f"sender {message.sender}. Nothing was opened. If you checked that it is theirs to "
            "ask about, tick “open it anyway” and sort again."
        )
    with transaction.atomic():
        if not _handled(message, by, Message.Status.NEEDS_SORTING, Message.Status.OPENED):
            raise _taken(message)
        try:
            # No note: the message itself is on the ticket's page, its reading on the card.
            # The sorter chose the orders: they open what their sort opens (four-eyes).
            where = open_or_add(
                [o.number for o in orders],
                opened_by=by,
                actor=by,
                reason=reason,
                reading=message.reading,
            )
        except RefundError as exc:  # several customers' orders: nothing of it is kept
            raise SortingError(f"{exc} Nothing was opened; sort one customer's orders.") from exc
        link(message, where)
        for ticket, _ in where.added:
            audit.record(
                ticket,
                AuditEvent.Action.NOTE,
                actor=by,
                note=f"Message {message.pk} from {message.sender} added to this ticket.",
                seen={"sorted_message_id": message.pk},
            )
        MessageEvent.objects.create(
            message=message,
            actor=by,
            action=MessageEvent.Action.SORT,
            answer={
                "orders": [o.number for o in orders],
                "reason": reason,
                "opened": [where.opened.pk] if where.opened else [],
                "added": [t.pk for t, _ in where.added],
                "other_customer": [o.number for o in others],
            },
        )
    message.refresh_from_db()
    return where


REPLY_MAX = 4000  # an agent's own words to the customer


def message_mark_not_refund(
    *,
    message: Message,
    by,
    canned: CannedReason | None = None,
    words: str = "",
    no_reply_why: str = "",
) -> Message:
    """ "Not a refund request": set aside, the customer answered with a canned reply and/or the
    agent's words, or not at all with why; the reply is an outbox row sent once after commit."""
    permissions.deny(permissions.sort_refusal(by))
    words, no_reply_why = (words or "").strip(), (no_reply_why or "").strip()
    if canned is not None and canned.use != CannedReason.Use.SET_ASIDE:
        raise SortingError("That canned reply is not one for setting a message aside.")
    replying = canned is not None or bool(words)
    if replying and no_reply_why:
        raise SortingError("Either reply to the customer or say why no reply is needed, not both.")
    if not replying and not no_reply_why:
        raise SortingError(
            "Answer the customer before setting the message aside: pick a reply, write your "
            "own, or say why no reply is needed."
        )
    if len(words) > REPLY_MAX or len(no_reply_why) > NOTE_MAX:
        raise SortingError(f"That is too long (at most {REPLY_MAX} characters).")
    if replying and message_problems(sender=message.sender, body="x"):
        raise SortingError(
            f"We cannot write to {message.sender}; set it aside with no reply and say why."
        )
    with transaction.atomic():
        if not _handled(message, by, Message.Status.NEEDS_SORTING, Message.Status.NOT_REFUND):
            raise _taken(message)
        kind = "none" if not replying else ("canned" if canned is not None else "own")
        answer: dict[str, Any] = {"reply": kind}
        if canned is not None:
            answer["canned"] = canned.title
        if no_reply_why:
            answer["why"] = no_reply_why
        event = MessageEvent.objects.create(
            message=message, actor=by, action=MessageEvent.Action.NOT_REFUND, answer=answer
        )
        if replying:
            email = _reply_set_aside(message, event, canned, words)
            MessageEvent.objects.filter(pk=event.pk).update(answer=answer | {"email": email.pk})
            enqueue.resend_on_commit(email.pk)
    message.refresh_from_db()
    return message


def _reply_set_aside(
    message: Message, event: MessageEvent, canned: CannedReason | None, words: str
) -> Email:
    """The reply in the outbox: the canned text in the customer's language, else in English."""
    language = (message.reading or {}).get("language", "")
    said = canned.text_in(language) if canned else ""
    if said is None:
        said, language = canned.text if canned else "", "en"
    facts = {
        "subject": message.subject,
        "first_name": (message.sender_name.split() or [""])[0],
        "text": "\n\n".join(t for t in (said, words) if t),
    }
    worded = emails.word("set_aside", facts, language)
    return Email.objects.create(
        key=f"{REPLY_PREFIX}{message.pk}:{event.pk}",
        to=message.sender,
        subject=worded.subject,
        body=worded.body,
        language=worded.language,
        desk_text=worded.desk_text,
    )


def message_set_aside_undo(*, message: Message, by) -> Message:
    """A set-aside message goes back to "Needs sorting"; a reply sent stays sent."""
    permissions.deny(permissions.sort_refusal(by))
    with transaction.atomic():
        won = _handled(
            message,
            by,
            Message.Status.NOT_REFUND,
            Message.Status.NEEDS_SORTING,
            sorting_reason=f"{by.username} brought it back from the messages set aside.",
        )
        if not won:
            fresh = Message.objects.get(pk=message.pk)
            raise SortingError(
                f"This message is not set aside any more: it is "
                f"{fresh.get_status_display().lower()}. Nothing was changed."
            )
        MessageEvent.objects.create(
            message=message, actor=by, action=MessageEvent.Action.UNDO_NOT_REFUND
        )
    message.refresh_from_db()
    return message


def set_aside_email(event: MessageEvent | None) -> Email | None:
    """The outbox row of the reply a setting aside sent (None: no reply)."""
    email_id = (event.answer or {}).get("email") if event is not None else None
    return Email.objects.filter(pk=email_id).first() if email_id else None


def set_aside_event(message: Message) -> MessageEvent | None:
    """The latest setting aside of a message (who, when, what the customer was told)."""
    return (
        message.events.filter(action=MessageEvent.Action.NOT_REFUND)
        .select_related("actor")
        .order_by("-at", "-id")
        .first()
    )


def message_send_back(*, ticket: Ticket, why: str, by) -> list[Message]:
    """A misread message: its review ends rejected (the customer told nothing) and it returns to
    "Needs sorting", in one transaction: both move, or neither."""
    why = (why or "").strip()
    if not why:
        raise SortingError("Say what was misread; whoever sorts it again reads your words.")
    if len(why) > NOTE_MAX:
        raise SortingError(f"That is too long (at most {NOTE_MAX} characters).")
    placed = (Message.Status.OPENED, Message.Status.ADDED)
    # A customer's reply to a question is no request to read again: it stays on the ticket.
    messages = list(ticket.messages.filter(status__in=placed, answers_question__isnull=True))
    if not messages:
        raise SortingError("This ticket was not opened from a customer's message.")
    now = timezone.now()
    with transaction.atomic():
        ticket_decide(
            ticket=ticket,
            interrupt_id=ticket.pending_interrupt_id,
            orders=review_answers(ticket, answer="reject", reason=SENT_BACK_REASON),
            note=f"Sent back to Needs sorting: {why}",
            reviewer=by,
            sent_back=True,
        )
        # Of two reviewers sending back at once, ticket_decide let one through (the interrupt
        # id is UNIQUE); only that one gets here.
        Message.objects.filter(
            pk__in=[m.pk for m in messages], ticket=ticket, status__in=placed
        ).update(
            status=Message.Status.NEEDS_SORTING,
            sorting_reason=f"Sent back by {by.username}: {why}",
            handled_by=by,
            handled_at=now,
            updated_at=now,
        )
        # Back in "Needs sorting", the message is no longer on this ticket.
        MessageTicket.objects.filter(message__in=messages, ticket=ticket).delete()
        for message in messages:
            MessageEvent.objects.create(
                message=message,
                actor=by,
                action=MessageEvent.Action.SEND_BACK,
                answer={"ticket": ticket.pk},
                note=why,
            )
    return messages
