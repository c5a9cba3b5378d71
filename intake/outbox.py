"""The intake's acknowledgments in the outbox (refunds/mail.py), for the admins' pages: which
rows are the intake's (key "<thread_id>:ack"), which the intake will not send again (its message
finished: no worker takes a finished message), what each is about, and who resent one.

Registered with refunds' mail by intake/apps.py, as the intake's sweep is with refunds' sweep:
refunds imports nothing of the intake."""

from __future__ import annotations

from typing import Any

from django.db.models import Exists, OuterRef, Q, QuerySet, Value
from django.db.models.functions import Concat
from django.urls import reverse

from intake.models import ACK_SUFFIX, Message, MessageEvent
from refunds import mail
from refunds.models import Email


def _by_ack_key() -> QuerySet[Message]:
    return Message.objects.annotate(ack=Concat("thread_id", Value(ACK_SUFFIX))).filter(
        ack=OuterRef("key")
    )


def owns() -> Q:
    return Q(Exists(_by_ack_key()))


def settled() -> Q:
    return Q(Exists(_by_ack_key().filter(finished_at__isnull=False)))


def about(emails: list[Email]) -> dict[int, tuple[str, str]]:
    keys = {e.key.removesuffix(ACK_SUFFIX): e.pk for e in emails if e.key.endswith(ACK_SUFFIX)}
    found = {}
    for message in Message.objects.filter(thread_id__in=keys):
        subject = message.subject or "(no subject)"
        found[keys[message.thread_id]] = (
            f"Acknowledgment of message {message.pk} from {message.sender}: “{subject}”",
            reverse("reviews:message", args=[message.pk]),
        )
    return found


def resent(email: Email, by: Any) -> None:
    message = Message.objects.filter(thread_id=email.key.removesuffix(ACK_SUFFIX)).first()
    if message is not None:
        MessageEvent.objects.create(
            message=message,
            actor=by,
            action=MessageEvent.Action.RESEND,
            answer={"email": email.pk, "last_error": email.last_error},
        )


def customer_message_ids(email: Email) -> list[str]:
    """The Message-IDs of the customer's messages an outbox row answers: its acknowledgment's
    message, or the messages placed on its ticket (oldest first), for refunds/mail.py's
    In-Reply-To and References."""
    if email.key.endswith(ACK_SUFFIX):
        found = Message.objects.filter(thread_id=email.key.removesuffix(ACK_SUFFIX))
    elif email.ticket_id is not None:
        found = Message.objects.filter(placements__ticket_id=email.ticket_id).order_by("pk")
    else:
        return []
    return [m for m in found.values_list("message_id", flat=True) if m]


ACKNOWLEDGMENTS = mail.OtherRun(
    owns=owns,
    settled=settled,
    busy="The intake is still working on this message; it sends its acknowledgment itself.",
    about=about,
    resent=resent,
)
