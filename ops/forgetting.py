"""What the erasure workflow does in each store (ops/erasure.py runs one task per function).

Each function takes the erasure and its scope (ids only: no personal data enters the erasure's
own checkpoints), is idempotent (run again after a kill, it finds nothing left or writes the
same placeholders) and returns what it erased, counted. The books keep amounts, dates, order
and payment references, and decisions with who took them; names, addresses, emails and the
customer's words are replaced by a placeholder or removed."""

from __future__ import annotations

import logging
from collections.abc import Iterable
from datetime import timedelta
from typing import Any, TypedDict

from django.conf import settings
from django.db.models import Q, TextField
from django.db.models.functions import Cast
from django.utils import timezone

from api.models import IdempotentRequest
from intake.attachments import storage
from intake.models import REPLY_PREFIX, Attachment, Message, MessageEvent, MessageTicket
from ops.models import Erasure
from refunds import persistence
from refunds.flow.nodes.common import customer_namespace
from refunds.models import (
    AuditEvent,
    CustomerQuestion,
    Decision,
    Email,
    Fork,
    Order,
    StripeEvent,
    Ticket,
    TicketOrder,
)
from refunds.models.orders import of_customer
from refunds.outbox import ERASED_DOMAIN
from webhooks.models import Attempt, Delivery

log = logging.getLogger(__name__)

ERASED = "(erased)"
UNSENT = (Email.Status.PENDING, Email.Status.SENDING)


class Scope(TypedDict):
    """What one erasure covers, by id; `waiting_for`: its tickets still open."""

    orders: list[int]
    tickets: list[int]
    messages: list[int]
    files_of: list[int]  # messages whose attachments go (retention keeps the rest longer)
    waiting_for: list[int]


def scope(erasure: Erasure) -> Scope:
    if erasure.kind == Erasure.Kind.CUSTOMER:
        orders = set(
            of_customer(Order.objects.all(), erasure.email).values_list("pk", flat=True)
        ) | set(Order.objects.filter(number__in=erasure.orders).values_list("pk", flat=True))
        messages = set(
            of_customer(Message.objects.all(), erasure.email, field="sender").values_list(
                "pk", flat=True
            )
        )
    else:
        cutoff = erasure.ended_before or timezone.now()
        # An order whose every ticket ended before the cutoff (and none is open).
        recent = TicketOrder.objects.filter(
            Q(ticket__updated_at__gte=cutoff) | ~Q(ticket__status__in=Ticket.FINAL)
        ).values("order_id")
        orders = set(
            Order.objects.filter(erased_at=None, links__isnull=False)
            .exclude(pk__in=recent)
            .values_list("pk", flat=True)[: settings.REFUNDS_RETENTION_BATCH]
        )
        # Messages that opened no ticket: read and set aside (or sorted) before the cutoff.
        messages = set(
            Message.objects.filter(
                erased_at=None, ticket=None, finished_at__lt=cutoff, received_at__lt=cutoff
            ).values_list("pk", flat=True)[: settings.REFUNDS_RETENTION_BATCH]
        )
    # The tickets of those orders, and those the messages went to (an order of another address).
    tickets = set(
        TicketOrder.objects.filter(order_id__in=orders).values_list("ticket_id", flat=True)
    ) | set(
        MessageTicket.objects.filter(message_id__in=messages).values_list("ticket_id", flat=True)
    )
    messages |= set(Message.objects.filter(ticket_id__in=tickets).values_list("pk", flat=True))
    files_of = set(messages)
    if erasure.kind == Erasure.Kind.RETENTION:
        files_before = timezone.now() - timedelta(days=settings.REFUNDS_RETAIN_ATTACHMENTS_DAYS)
        files_of |= set(
            Attachment.objects.filter(message__received_at__lt=files_before)
            .exclude(message__ticket__status__in=Ticket.OPEN)
            .values_list("message_id", flat=True)[: settings.REFUNDS_RETENTION_BATCH]
        )
    return {
        "orders": sorted(orders),
        "tickets": sorted(tickets),
        "messages": sorted(messages),
        "files_of": sorted(files_of),
        "waiting_for": sorted(still_open(tickets).values_list("pk", flat=True)),
    }


def still_open(tickets: Iterable[int]):
    """The tickets an erasure waits for: open, or ended with mail still to go (the outbox
    retries it until it is sent, or it fails for good)."""
    unsent = Email.objects.filter(ticket_id__in=tickets, status__in=UNSENT).values("ticket_id")
    return Ticket.objects.filter(pk__in=tickets).filter(
        ~Q(status__in=Ticket.FINAL) | Q(pk__in=unsent)
    )


def checkpoints(erasure: Erasure, scope: Scope) -> dict[str, int]:
    """Every checkpoint and pending write of the tickets' and messages' threads: their state
    holds the customer's words in every version. The app's rows tell their story after."""
    threads = list(
        Ticket.objects.filter(pk__in=scope["tickets"]).values_list("thread_id", flat=True)
    )
    threads += Message.objects.filter(pk__in=scope["messages"]).values_list("thread_id", flat=True)
    saver = persistence.checkpointer()
    for thread_id in threads:
        saver.delete_thread(thread_id)
    return {"threads": len(threads)}


def memory(erasure: Erasure, scope: Scope) -> dict[str, int]:
    """The store's memory of the customer: the refunds of these tickets (all of the customer's,
    for a customer's request), kept under their email address."""
    tickets = Ticket.objects.filter(pk__in=scope["tickets"])
    keys = set(tickets.values_list("thread_id", flat=True))
    emails = set(
        Order.objects.filter(pk__in=scope["orders"]).values_list("customer_email", flat=True)
    )
    if erasure.email:
        emails.add(erasure.email)
    the_store = persistence.store()
    gone = 0
    for email in emails:
        namespace = customer_namespace(email)
        for item in the_store.search(namespace, limit=10_000):
            ticket = item.key.split(":", 1)[0]
            if erasure.kind == Erasure.Kind.CUSTOMER or ticket in keys:
                the_store.delete(namespace, item.key)
                gone += 1
    return {"items": gone}


def files(erasure: Erasure, scope: Scope) -> dict[str, int]:
    """The attachments' bytes in their storage (S3 included), then their rows."""
    kept = Attachment.objects.filter(message_id__in=scope["files_of"])
    names = list(kept.values_list("name", flat=True))
    where = storage()
    for name in names:
        where.delete(name)  # a missing file (a second run) is no error
    kept.delete()
    Message.objects.filter(pk__in=scope["files_of"]).exclude(attachments=[]).update(attachments=[])
    return {"files": len(names)}


def messages(erasure: Erasure, scope: Scope) -> dict[str, int]:
    """The customer's emails: words, names, addresses, the raw MIME; and people's notes on them."""
    rows = Message.objects.filter(pk__in=scope["messages"])
    for message in rows.filter(erased_at=None).only("pk"):
        Message.objects.filter(pk=message.pk).update(key=f"erased:{message.pk}")
    count = rows.update(
        sender=address(erasure),
        sender_name="",
        subject=ERASED,
        body=ERASED,
        unread="",
        raw="",
        message_id="",
        reading=None,
        sorting_reason=ERASED,
        last_error="",
        attachments=[],
        erased_at=timezone.now(),
    )
    MessageEvent.objects.filter(message_id__in=scope["messages"]).update(answer={}, note="")
    return {"messages": count}


def outbox(erasure: Erasure, scope: Scope) -> dict[str, int]:
    """What the desk sent or was to send: the customer's emails (their bodies quote them and
    their words) and the webhook deliveries about the tickets, with the answers they got."""
    acks = Message.objects.filter(pk__in=scope["messages"]).values_list("thread_id", flat=True)
    about = Q(ticket_id__in=scope["tickets"]) | Q(key__in=[f"{t}:received" for t in acks])
    for pk in scope["messages"]:
        about |= Q(key__startswith=f"{REPLY_PREFIX}{pk}:")
    if erasure.email:
        about |= Q(to__iexact=erasure.email)
    emails = Email.objects.filter(about).update(
        to=address(erasure),
        subject=ERASED,
        body=ERASED,
        desk_text="",
        last_error="",
        delivery_detail="",
    )
    # A delivery's payload names the ticket, not the customer, and is made as it is sent; what
    # the helpdesk answered may quote the customer.
    deliveries = Delivery.objects.filter(ticket_id__in=scope["tickets"]).values("pk")
    answers = Attempt.objects.filter(delivery_id__in=deliveries).update(response_body="", error="")
    return {"emails": emails, "webhook answers": answers}


def tickets(erasure: Erasure, scope: Scope) -> dict[str, int]:
    """Tickets, decisions, questions, forks and the audit trail: the decisions, who took them,
    when and for how much stay; the words (the customer's, and people's about them) go."""
    ids = scope["tickets"]
    count = Ticket.objects.filter(pk__in=ids).update(
        note="",
        reading=None,
        outcome_reason=ERASED,
        pending_payload=None,
        escalation_note="",
        last_error="",
    )
    Decision.objects.filter(ticket_id__in=ids).update(reason=ERASED, note="", refused_reason="")
    CustomerQuestion.objects.filter(ticket_id__in=ids).update(text=ERASED, early_reply=None)
    Fork.objects.filter(ticket_id__in=ids).update(reason=ERASED, refused_reason="")
    AuditEvent.objects.filter(ticket_id__in=ids).exclude(action=AuditEvent.Action.ERASE).update(
        seen={}, answer={}, note=""
    )
    return {"tickets": count}


def records(erasure: Erasure, scope: Scope) -> dict[str, int]:
    """What came in besides mail and named the customer: the API's kept answers and the
    processor's events (its payloads carry the payer's name and email)."""
    needles = _needles(erasure, scope)
    kept = 0
    for needle in needles:
        kept += IdempotentRequest.objects.filter(response__icontains=needle).update(response="{}")
    events = 0
    for needle in needles:
        texts = StripeEvent.objects.annotate(text=Cast("payload", TextField()))
        for event in texts.filter(text__icontains=needle).only("pk", "payload"):
            event.payload = redacted(event.payload, needles, address(erasure))
            event.save(update_fields=["payload"])
            events += 1
    return {"api answers": kept, "processor events": events}


def orders(erasure: Erasure, scope: Scope) -> dict[str, int]:
    """Last, as the steps before read the customer's email from them: the orders keep their
    references and amounts; the customer becomes the erasure's pseudonym."""
    count = Order.objects.filter(pk__in=scope["orders"]).update(
        customer_name=f"Erased customer {erasure.pseudonym}",
        customer_email=address(erasure),
        erased_at=timezone.now(),
    )
    return {"orders": count}


STEPS = {  # in this order: the first ones still find the customer's email where it was
    "checkpoints": checkpoints,
    "memory": memory,
    "records": records,
    "files": files,
    "outbox": outbox,
    "messages": messages,
    "tickets": tickets,
    "orders": orders,
}


def address(erasure: Erasure) -> str:
    return f"{erasure.pseudonym}@{ERASED_DOMAIN}"


def _needles(erasure: Erasure, scope: Scope) -> list[str]:
    """The customer's email addresses and names, as the orders and messages still hold them."""
    found: set[str] = {erasure.email} if erasure.email else set()
    for name, email in Order.objects.filter(pk__in=scope["orders"], erased_at=None).values_list(
        "customer_name", "customer_email"
    ):
        found |= {name, email}
    found |= set(
        Message.objects.filter(pk__in=scope["messages"], erased_at=None).values_list(
            "sender", flat=True
        )
    )
    return sorted(n for n in found if len(n) >= 3)


def redacted(value: Any, needles: Iterable[str], placeholder: str) -> Any:
    """`value` (JSON) with every string that holds a needle replaced by the placeholder."""
    lowered = [n.lower() for n in needles]
    if isinstance(value, dict):
        return {k: redacted(v, lowered, placeholder) for k, v in value.items()}
    if isinstance(value, list):
        return [redacted(v, lowered, placeholder) for v in value]
    if isinstance(value, str) and any(n in value.lower() for n in lowered):
        return placeholder
    return value
