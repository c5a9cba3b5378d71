"""Customers' messages in, by any channel. A faulty message from the API or the desk is refused;
an email (the provider already took it from the customer) is stored for "Needs sorting"."""

from __future__ import annotations

import hashlib
import uuid
from datetime import datetime, timedelta

from django.conf import settings
from django.contrib.auth import get_user_model
from django.core.exceptions import PermissionDenied, ValidationError
from django.core.validators import validate_email
from django.db import transaction
from django.db.models import Case, CharField, F, Q, TextField, Value, When
from django.utils import timezone

from intake import replies
from intake.models import Message, MessageEvent
from refunds import enqueue, permissions
from refunds.services import RefundError, wake_all

TAKE = "intake.tasks.take_message"
KEY_MAX = Message._meta.get_field("key").max_length or 300
SUBJECT_MAX = Message._meta.get_field("subject").max_length or 998
SENDER_MAX = 254


class MessageRefused(RefundError):
    """The message cannot go in as it is; the text says what is wrong, for the sender to fix."""


def message_receive(
    *,
    channel: str,
    key: str,
    sender: str,
    sender_name: str = "",
    subject: str,
    body: str,
    received_at: datetime,
    raw: str,
    message_id: str = "",
    brought_by=None,
    attachments: list[dict] | None = None,
    wake: bool = True,
    recipients: list[str] | None = None,
    references: list[str] | None = None,
    verdicts: dict[str, str] | None = None,
    unread: str = "",
) -> tuple[Message, bool]:
    """Store a customer's message once by its key and start its intake on commit. `brought_by`
    opens its ticket (four-eyes); `recipients` and `references` find the question it answers."""
    if channel not in Message.Channel.values:
        raise ValueError(f"unknown channel {channel!r}")
    if (brought_by is None) != (channel == Message.Channel.EMAIL):
        raise ValueError(f"a message by {channel} is brought in by a person; only email is not")
    key = _channel_key(channel, key)
    sender = _clean(sender).strip()
    body = _clean(body)
    uncut_chars = None
    # A long email is no fault: what a person writes is at its top, and `raw` keeps all of it.
    if channel == Message.Channel.EMAIL and len(body) > settings.INTAKE_MAX_CHARS:
        uncut_chars, body = len(body), body[: settings.INTAKE_MAX_CHARS]
    problems = message_problems(sender=sender, body=body)
    forged = _not_authenticated(verdicts or {})
    if problems and channel != Message.Channel.EMAIL:
        raise MessageRefused(" ".join(problems))
    fields = {
        "channel": channel,
        "sender": sender[:SENDER_MAX],
        "sender_name": _clean(sender_name).strip()[:200],
        # On one line: it is the first line of our emails about it (their subject).
        "subject": " ".join(_clean(subject).split())[:SUBJECT_MAX],
        "body": body,
        "uncut_chars": uncut_chars,
        "unread": unread,
        "received_at": received_at,
        "raw": _clean(raw),
        "message_id": " ".join(_clean(message_id).split())[:998],
        "brought_by": brought_by,
        "attachments": [
            {k: _clean(v) if isinstance(v, str) else v for k, v in about.items()}
            for about in attachments or []
        ],
        # Random, not derived from the key: a thread id is never reused, even by a database
        # restored from a backup beside checkpoints that were not.
        "thread_id": f"intake-{uuid.uuid4().hex}",
        # Read by the workflow: a message with a fault is read and acknowledged, never placed.
        "sorting_reason": " ".join(problems) or _not_a_customer(sender) or forged,
    }
    with transaction.atomic():
        message, created = Message.objects.get_or_create(key=key, defaults=fields)
        if (
            created
            and not forged
            and replies.reply_place(
                message, recipients=recipients or [], references=references or []
            )
        ):
            message.refresh_from_db()
        elif created and wake:
            enqueue.send_on_commit(TAKE, message.pk)
    return message, created


def _not_a_customer(sender: str) -> str:
    """Four-eyes: a reviewer writing "as a customer" would open a ticket they could approve."""
    if not get_user_model().objects.filter(email__iexact=sender, is_active=True).exists():
        return ""
    return (
        f"The sender {sender} is the address of a desk user, not a customer's: a person sorts "
        "it, and whoever sorts it opens its ticket."
    )


def _not_authenticated(verdicts: dict[str, str]) -> str:
    """Why a person sorts an email that passed neither SPF nor DKIM (anyone can write a From)."""
    if not verdicts or "pass" in verdicts.values():
        return ""
    said = ", ".join(f"{check.upper()} {verdict}" for check, verdict in verdicts.items())
    return (
        f"The mail provider's checks did not confirm the sender ({said}): the From may be "
        "forged, so a person sorts it, and whoever sorts it opens its ticket."
    )


def message_problems(*, sender: str, body: str) -> list[str]:
    """What keeps a message from going in as it is, in words for whoever sent it."""
    problems = []
    if not sender:
        problems.append("The sender's address is missing.")
    else:
        try:
            validate_email(sender)
        except ValidationError:
            problems.append(f"The sender {sender[:80]!r} is not an email address.")
    if not body.strip():
        problems.append("The message has no text.")
    elif len(body) > settings.INTAKE_MAX_CHARS:
        problems.append(
            f"The message is {len(body):,} characters long; at most "
            f"{settings.INTAKE_MAX_CHARS:,} are taken."
        )
    return problems


def _channel_key(channel: str, key: str) -> str:
    key = _clean(key).strip()
    if not key:
        raise ValueError("a message needs a key")
    full = f"{channel}:{key}"
    if len(full) > KEY_MAX:  # a long Message-ID: its digest is as unique
        full = f"{channel}:sha256:{hashlib.sha256(key.encode()).hexdigest()}"
    return full


def _clean(text: str) -> str:
    # PostgreSQL refuses a NUL in any text; a customer's message never means one.
    return (text or "").replace("\x00", "\ufffd")


def messages_recover() -> list[int]:
    """The sweep's part: re-enqueue each unfinished message no worker holds."""
    settled_before = timezone.now() - timedelta(seconds=settings.REFUNDS_SWEEP_GRACE_SECONDS)
    rows = Message.objects.needing_worker(settled_before=settled_before)
    # Throttled as tickets' wake-ups are: one in the queue per message, not one per sweep.
    return wake_all(rows, TAKE, "message")


def message_retry(*, message: Message, by) -> bool:
    """Admin: hand a given-up message back to the intake; False when retried already."""
    if not permissions.is_admin(by):
        raise PermissionDenied("Only admins hand a message back to the intake.")
    # Put in "Needs sorting" by the give-up itself (its reason is the error), unsorted since.
    by_give_up = Q(status=Message.Status.NEEDS_SORTING, handled_by=None) & Q(
        sorting_reason=F("last_error")
    )
    problems = " ".join(message_problems(sender=message.sender, body=message.body))
    with transaction.atomic():
        given_up = Message.objects.given_up().filter(pk=message.pk)
        error = given_up.values_list("last_error", flat=True).first()
        # One conditional UPDATE: of two admins retrying at once, one wins.
        won = given_up.update(
            status=Case(
                When(by_give_up, then=Value(Message.Status.RECEIVED)),
                default=F("status"),
                output_field=CharField(),
            ),
            sorting_reason=Case(
                When(by_give_up, then=Value(problems)),
                default=F("sorting_reason"),
                output_field=TextField(),
            ),
            finished_at=None,
            attempts=0,
            last_error="",
            lease_owner="",
            lease_expires_at=None,
            updated_at=timezone.now(),
        )
        if not won:
            return False
        MessageEvent.objects.create(
            message=message, actor=by, action=MessageEvent.Action.RETRY, note=error or ""
        )
        enqueue.send_on_commit(TAKE, message.pk)
    return True
