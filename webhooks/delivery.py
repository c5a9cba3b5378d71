"""The webhook outbox: fan events out to endpoints, claim due deliveries, POST them signed.

At least once: a delivery row is claimed with one conditional UPDATE (status "sending", our
claim, attempts + 1) before the POST; a 2xx marks it delivered, anything else puts it back with
an exponential backoff (WEBHOOK_RETRY_BASE_SECONDS x 2^(attempt - 1), at most an hour) until
WEBHOOK_MAX_ATTEMPTS, then "failed", shown in admin with its log and a "send again" action. A
sender that dies mid-POST leaves a stale claim, taken over after the send window: the receiver
may then see the event twice, with the same event id (`Refund-Desk-Event-Id`, and `id` in the
body), which is how it de-duplicates. Every attempt is written to the delivery log."""

from __future__ import annotations

import json
import logging
import time
import uuid
from datetime import timedelta

import httpx
from django.conf import settings
from django.db import transaction
from django.db.models import F, Q
from django.utils import timezone

from core.logs import bound
from core.masking import mask
from refunds import metrics
from webhooks import signing
from webhooks.models import Attempt, Delivery, Endpoint, Event

log = logging.getLogger(__name__)
MAX_BACKOFF = timedelta(hours=1)
USER_AGENT = "RefundDesk-Webhooks/1"


def payload(event: Event) -> dict:
    ticket = event.ticket
    return {
        "id": event.event_id,
        "type": "ticket.status_changed",
        "created_at": event.created_at.isoformat(),
        "data": {
            "ticket": {
                "id": ticket.pk,
                "thread_id": ticket.thread_id,
                "order_number": ticket.order.number,
                "status": event.to_status,
                "previous_status": event.from_status or None,
                "amount_cents": event.amount_cents,
                "required_role": event.required_role or None,
                "url": f"/api/tickets/{ticket.pk}/",
            }
        },
    }


def fan_out(limit: int = 500) -> int:
    """Make a delivery per event and per active endpoint that wants its status. Idempotent: the
    UNIQUE (event, endpoint) keeps a second sweep from doubling anything."""
    events = list(Event.objects.filter(fanned_out=False).order_by("id")[:limit])
    if not events:
        return 0
    endpoints = list(Endpoint.objects.filter(active=True))
    rows = [
        Delivery(event=event, endpoint=endpoint)
        for event in events
        for endpoint in endpoints
        if endpoint.wants(event.to_status)
    ]
    with transaction.atomic():
        Delivery.objects.bulk_create(rows, ignore_conflicts=True)
        Event.objects.filter(pk__in=[e.pk for e in events]).update(fanned_out=True)
    # Events no endpoint wanted are not kept: the table holds what is owed to someone.
    Event.objects.filter(pk__in=[e.pk for e in events], deliveries__isnull=True).delete()
    return len(rows)


def send_window() -> timedelta:
    """How long a live sender may still be inside one POST; an older claim is taken over."""
    return timedelta(seconds=2 * settings.WEBHOOK_TIMEOUT + 5)


def _claim(delivery_id: int, claim: str) -> bool:
    now = timezone.now()
    due = Q(status=Delivery.Status.PENDING, next_attempt_at__lte=now) | Q(
        status=Delivery.Status.SENDING, claimed_at__lt=now - send_window()
    )
    return bool(
        Delivery.objects.filter(due, pk=delivery_id).update(
            status=Delivery.Status.SENDING,
            claimed_by=claim,
            claimed_at=now,
            attempts=F("attempts") + 1,
        )
    )


def deliver_due(*, limit: int = 100, client: httpx.Client | None = None) -> dict[str, int]:
    """One sweep: fan out new events, then send what is due, oldest first."""
    fan_out()
    now = timezone.now()
    due = list(
        Delivery.objects.filter(
            Q(status=Delivery.Status.PENDING, next_attempt_at__lte=now)
            | Q(status=Delivery.Status.SENDING, claimed_at__lt=now - send_window())
        )
        .order_by("next_attempt_at", "id")
        .values_list("pk", flat=True)[:limit]
    )
    counts = {"delivered": 0, "retrying": 0, "failed": 0, "skipped": 0}
    own_client = client is None
    client = client or httpx.Client(timeout=settings.WEBHOOK_TIMEOUT, follow_redirects=False)
    try:
        for delivery_id in due:
            counts[send(delivery_id, client=client)] += 1
    finally:
        if own_client:
            client.close()
    return counts


def send(delivery_id: int, *, client: httpx.Client) -> str:
    claim = uuid.uuid4().hex
    if not _claim(delivery_id, claim):
        return "skipped"  # another sender has it, or it is no longer due
    delivery = Delivery.objects.select_related("endpoint", "event__ticket__order").get(
        pk=delivery_id
    )
    event, endpoint = delivery.event, delivery.endpoint
    body = json.dumps(payload(event), separators=(",", ":"), sort_keys=True).encode()
    headers = {
        "Content-Type": "application/json",
        "User-Agent": USER_AGENT,
        signing.EVENT_ID_HEADER: event.event_id,
        "Refund-Desk-Delivery-Attempt": str(delivery.attempts),
        signing.HEADER: signing.sign(endpoint.secret, body),
    }
    started = time.monotonic()
    code, error, answer = None, "", ""
    with bound(
        ticket_id=event.ticket_id, thread_id=event.ticket.thread_id, event_id=event.event_id
    ):
        try:
            response = client.post(endpoint.url, content=body, headers=headers)
            code, answer = response.status_code, response.text[:500]
            if not 200 <= code < 300:
                error = f"the endpoint answered {code}"
        except httpx.HTTPError as exc:
            error = f"{type(exc).__name__}: {exc}" or type(exc).__name__
        elapsed = round((time.monotonic() - started) * 1000)
        Attempt.objects.create(
            delivery=delivery,
            status_code=code,
            error=mask(error)[:2000],
            response_body=answer,
            duration_ms=elapsed,
        )
        mine = Delivery.objects.filter(pk=delivery_id, claimed_by=claim)
        if not error:
            mine.update(
                status=Delivery.Status.DELIVERED,
                delivered_at=timezone.now(),
                last_status_code=code,
                last_error="",
            )
            log.info("webhook %s delivered to %s", event.event_id, endpoint.pk)
            return "delivered"
        _count_failure()
        error = mask(error)[:2000]
        if delivery.attempts >= settings.WEBHOOK_MAX_ATTEMPTS:
            mine.update(status=Delivery.Status.FAILED, last_status_code=code, last_error=error)
            log.warning("webhook %s to %s failed for good: %s", event.event_id, endpoint.pk, error)
            return "failed"
        backoff = timedelta(
            seconds=settings.WEBHOOK_RETRY_BASE_SECONDS * 2 ** (delivery.attempts - 1)
        )
        mine.update(
            status=Delivery.Status.PENDING,
            next_attempt_at=timezone.now() + min(backoff, MAX_BACKOFF),
            last_status_code=code,
            last_error=error,
        )
        log.warning("webhook %s to %s will be retried: %s", event.event_id, endpoint.pk, error)
        return "retrying"


def send_again(delivery_ids: list[int]) -> int:
    """An admin's "send again": due now, whatever happened before (a delivered one too: the
    receiver asked for it, and de-duplicates by event id). Each press is one more attempt."""
    return (
        Delivery.objects.filter(pk__in=delivery_ids)
        .exclude(status=Delivery.Status.SENDING)
        .update(status=Delivery.Status.PENDING, next_attempt_at=timezone.now())
    )


def _count_failure() -> None:
    metrics.WEBHOOK_FAILURES.inc()
