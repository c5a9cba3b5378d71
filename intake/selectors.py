"""Reads of customers' messages that the desk's pages share."""

from __future__ import annotations

from django.db.models import Q, QuerySet

from intake.models import Attachment, Message
from refunds import permissions
from refunds.models import Order, TicketOrder, of_customer, same_customer

COUNT_CAP = 1000  # the nav says "1000+" past this: a count must not cost more with a backlog
SENDER_ORDERS = 5  # the sender's recent orders offered beside the numbers read


def messages_visible(user) -> QuerySet[Message]:
    """The customers' messages this user may read."""
    messages = Message.objects.all()
    if permissions.oversees(user):
        return messages
    if not permissions.is_agent(user):
        return messages.none()
    return messages.filter(
        Q(ticket__in=permissions.visible(user))
        | Q(status=Message.Status.NEEDS_SORTING)
        | Q(ticket__isnull=True, brought_by=user)
        | Q(status=Message.Status.NOT_REFUND, handled_by=user)  # set aside by them: to undo
    )


def reply_files(ticket_id: int) -> QuerySet[Attachment]:
    """The files of the customer's replies that resumed this ticket's waits, oldest first."""
    return Attachment.objects.filter(
        message__ticket_id=ticket_id, message__resumed_wait=True
    ).order_by("message_id", "id")


def messages_needing_sorting() -> QuerySet[Message]:
    """Messages the intake could not place (or a reviewer sent back), newest first."""
    return Message.objects.filter(status=Message.Status.NEEDS_SORTING).order_by("-id")


def messages_set_aside(user) -> QuerySet[Message]:
    """Messages set aside as not a refund request that this user may read, latest first."""
    return (
        messages_visible(user)
        .filter(status=Message.Status.NOT_REFUND)
        .order_by("-handled_at", "-id")
    )


def needs_sorting_count() -> int:
    """How many wait to be sorted, counted up to COUNT_CAP + 1 (read "more than")."""
    return messages_needing_sorting()[: COUNT_CAP + 1].count()


def order_choices(message: Message) -> list[dict]:
    """The numbers the reader found, then the sender's recent orders; each says whose it is."""
    read = [str(n) for n in (message.reading or {}).get("orders") or []]
    known = {o.number: o for o in Order.objects.filter(number__in=read)}
    choices: list[dict] = []
    for number in read:
        order = known.get(number)
        choices.append(
            {
                "number": number,
                "read": True,
                "order": order,
                "other_customer": order is not None
                and not same_customer(order.customer_email, message.sender),
            }
        )
    for order in of_customer(Order.objects.all(), message.sender).order_by("-id")[:SENDER_ORDERS]:
        if order.number not in read:
            choices.append(
                {"number": order.number, "read": False, "order": order, "other_customer": False}
            )
    # Each order's latest ticket, in one query: whether it was refunded already, or is open.
    orders = [c["order"].pk for c in choices if c["order"]]
    links = TicketOrder.objects.filter(order_id__in=orders).select_related("ticket")
    latest = {link.order_id: link.ticket for link in links.order_by("ticket_id")}
    for choice in choices:
        choice["ticket"] = latest.get(choice["order"].pk) if choice["order"] else None
    return choices
