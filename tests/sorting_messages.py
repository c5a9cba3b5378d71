"""Messages waiting in "Needs sorting", built straight in the database (as the intake leaves
them) for the tests of the desk's side of the intake."""

from __future__ import annotations

import uuid

from django.utils import timezone

from intake.models import Message
from intake.reading import Reading
from refunds import policy


def a_reading(
    reason: str = policy.DAMAGED,
    orders: tuple[str, ...] = ("1042",),
    *,
    read_by: str = "rules",
    fallback: str = "",
    amount_cents: int | None = None,
) -> dict:
    return Reading(
        reason=reason,
        orders=list(orders),
        amount_cents=amount_cents,
        language="en",
        summary="The mug arrived broken; Ana asks for her money back.",
        quotes={"reason": "the mug arrived in pieces", "orders": "order #1042"},
        read_by=read_by,
        fallback=fallback,
    ).as_json()


def waiting_message(
    *,
    sender: str = "ana@example.com",
    subject: str = "Broken mug",
    body: str = "Hi, the mug arrived in pieces. It was order #1042. Thanks, Ana",
    reading: dict | None = None,
    sorting_reason: str = "several customers' orders",
    status: str = Message.Status.NEEDS_SORTING,
) -> Message:
    key = uuid.uuid4().hex
    return Message.objects.create(
        key=f"api:{key}",
        channel=Message.Channel.API,
        sender=sender,
        sender_name="Ana Souza",
        subject=subject,
        body=body,
        received_at=timezone.now(),
        thread_id=f"intake-{key}",
        status=status,
        reading=a_reading() if reading is None else reading,
        sorting_reason=sorting_reason,
    )
