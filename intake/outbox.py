"""The intake's mail in the outbox (acknowledgments and replies to a message set aside), for the
admins' pages; registered by intake/apps.py, as refunds imports nothing of the intake."""

from __future__ import annotations

from typing import Any

from django.db.models import Exists, OuterRef, Q, QuerySet, Value
from django.db.models.functions import Concat
from django.urls import reverse

from intake.models import ACK_SUFFIX, REPLY_PREFIX, Message, MessageEvent
from refunds import mail
from refunds.models import Email, same_customer
from refunds.outbox import OtherRun


def _by_ack_key() -> QuerySet[Message]:
    return Message.objects.annotate(ack=Concat("thread_id", Value(ACK_SUFFIX))).filter(
        ack=OuterRef("key")
    )


REPLIES = Q(key__startswith=REPLY_PREFIX)


def owns() -> Q:
    return Q(Exists(_by_ack_key())) | REPLIES


def settled() -> Q:
    """Rows no intake run sends: none takes a finished message; mail.resend sends a reply."""
    return Q(Exists(_by_ack_key().filter(finished_at__isnull=False))) | REPLIES


def _replied_message(key: str) -> int | None:
    """The message a reply's key names ("intake-reply:<message>:<event>")."""
    head = key.removeprefix(REPLY_PREFIX).split(":")[0]
    return int(head) if key.startswith(REPLY_PREFIX) and head.isdigit() else None


def about(emails: list[Email]) -> dict[int, tuple[str, str]]:
    keys = {e.key.removesuffix(ACK_SUFFIX): e.pk for e in emails if e.key.endswith(ACK_SUFFIX)}
    found = {}
    for message in Message.objects.filter(thread_id__in=keys):
        subject = message.subject or "(no subject)"
        found[keys[message.thread_id]] = (
            f"Acknowledgment of message {message.pk} from {message.sender}: “{subject}”",
            reverse("reviews:message", args=[message.pk]),
        )
    replies = {e.pk: _replied_message(e.key) for e in emails if _replied_message(e.key)}
    senders = dict(Message.objects.filter(pk__in=replies.values()).values_list("pk", "sender"))
    for email_id, message_id in replies.items():
        if message_id in senders:
            found[email_id] = (
                f"Reply to message {message_id} from {senders[message_id]}, set aside as not "
                "a refund request",
                reverse("reviews:message", args=[message_id]),
            )
    return found


def resent(email: Email, by: Any) -> None:
    replied = _replied_message(email.key)
    message = (
        Message.objects.filter(pk=replied).first()
        if replied is not None
        else Message.objects.filter(thread_id=email.key.removesuffix(ACK_SUFFIX)).first()
    )
    if message is not None:
        MessageEvent.objects.create(
            message=message,
            actor=by,
            action=MessageEvent.Action.RESEND,
            answer={"email": email.pk, "last_error": email.last_error},
        )


def customer_message_ids(email: Email) -> list[str]:
    """The Message-IDs of the customer's messages an outbox row answers (In-Reply-To): each
    with its acknowledgment, as a message sorted by hand was acknowledged before its ticket."""
    if email.key.endswith(ACK_SUFFIX):
        found = Message.objects.filter(thread_id=email.key.removesuffix(ACK_SUFFIX))
        return [m for m in found.values_list("message_id", flat=True) if m]
    replied = _replied_message(email.key)
    if replied is not None:
        return _with_acknowledgments(list(Message.objects.filter(pk=replied)))
    if email.ticket_id is None:
        return []
    # Only the recipient's own: a reply from another address that resumed nothing is not theirs.
    placed = Message.objects.filter(placements__ticket_id=email.ticket_id).order_by("pk")
    return _with_acknowledgments([m for m in placed if same_customer(m.sender, email.to)])


def _with_acknowledgments(messages: list[Message]) -> list[str]:
    acked = set(
        Email.objects.filter(key__in=[m.ack_key for m in messages]).values_list("key", flat=True)
    )
    said: list[str] = []
    for message in messages:
        said += [message.message_id] if message.message_id else []
        said += [mail.message_id(message.ack_key)] if message.ack_key in acked else []
    return said


ACKNOWLEDGMENTS = OtherRun(
    owns=owns,
    settled=settled,
    busy="The intake is still working on this message; it sends its acknowledgment itself.",
    about=about,
    resent=resent,
)
