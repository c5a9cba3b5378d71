"""The outbox's webhook handler (rows of kind "webhook"): fan events out to endpoints, claim due
deliveries, POST them signed; at least once, with backoff (docs/integrations.md). A stale claim
is taken over after the send window: the receiver de-duplicates by the event id."""

from __future__ import annotations

import json
import logging
import time
import uuid
from collections import deque
from concurrent.futures import FIRST_COMPLETED, Future, ThreadPoolExecutor, wait
from dataclasses import dataclass
from datetime import timedelta

import httpx
from django.conf import settings
from django.db import transaction
from django.db.models import Q
from django.utils import timezone

from core import outbox
from core.logs import bound
from core.masking import mask
from core.network import outside_transaction
from refunds import metrics, selectors
from refunds.models import Ticket
from webhooks import addresses, signing
from webhooks.models import Attempt, Delivery, Endpoint, Event

log = logging.getLogger(__name__)
MAX_BACKOFF = timedelta(hours=1)
USER_AGENT = "RefundDesk-Webhooks/1"


def payload(event: Event) -> dict:
    """The event as receivers read it; the refund's state as the desk knows it when it is sent."""
    ticket = event.ticket
    progress = selectors.refund_progress(ticket)
    data: dict = {
        "ticket": {
            "id": ticket.pk,
            "thread_id": ticket.thread_id,
            "order_number": ticket.order.number,
            "status": event.to_status,
            "previous_status": event.from_status or None,
            "amount_cents": event.amount_cents,
            "required_role": event.required_role or None,
            "refund_state": progress["state"] if progress else None,
            "refund_words": progress["words"] if progress else None,
            "url": f"/api/tickets/{ticket.pk}/",
        }
    }
    if event.to_status == Ticket.Status.REFUNDED:
        # What came back, line by line, and which items return: the shop's stock follows it.
        data["refunds"] = selectors.refunds_given(ticket)
    return {
        "id": event.event_id,
        # A refunded ticket's refund moved: migration 0004's trigger writes "refunded" twice.
        "type": "ticket.refund_state_changed"
        if event.from_status == event.to_status
        else "ticket.status_changed",
        "created_at": event.created_at.isoformat(),
        "data": data,
    }


def fan_out(limit: int = 500) -> int:
    """Make a delivery per event and per active endpoint that wants its status. Idempotent: the
    outbox's UNIQUE key (the event's and the endpoint's) keeps a second sweep from doubling it."""
    events = list(Event.objects.filter(fanned_out=False).order_by("id")[:limit])
    if not events:
        return 0
    endpoints = list(Endpoint.objects.filter(active=True))
    rows = [
        Delivery(
            kind=Delivery.Kind.WEBHOOK,
            key=f"webhook:{event.pk}:{endpoint.pk}",
            ticket_id=event.ticket_id,
            event=event,
            endpoint=endpoint,
            next_attempt_at=timezone.now(),
        )
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


def _due() -> Q:
    return Q(status=Delivery.Status.PENDING, next_attempt_at__lte=timezone.now())


def deliver_due(*, limit: int = 100) -> dict[str, int]:
    """One sweep: fan out, then send what is due, each endpoint in order on its own thread, so a
    receiver that never answers holds only its own queue, once per sweep. Nothing is claimed
    after WEBHOOK_SWEEP_BUDGET_SECONDS: the sweep ends within budget + WEBHOOK_TIMEOUT."""
    outside_transaction("webhook endpoints")  # the pool's threads post; this one waits for them
    fan_out()
    due = (
        Delivery.objects.filter(_due() | outbox.stale(send_window()))
        .order_by("next_attempt_at", "id")
        .values_list("pk", "endpoint_id")[:limit]
    )
    queues: dict[int, deque[int]] = {}
    for delivery_id, endpoint_id in due:
        queues.setdefault(endpoint_id, deque()).append(delivery_id)
    counts = {"delivered": 0, "retrying": 0, "failed": 0, "skipped": 0, "deferred": 0}
    if not queues:
        return counts
    deadline = time.monotonic() + settings.WEBHOOK_SWEEP_BUDGET_SECONDS
    threads = min(settings.WEBHOOK_SWEEP_THREADS, len(queues))
    waiting = deque(queues)
    running: dict[Future[_Answer], _Outgoing] = {}
    # Only the POSTs run in the pool; claims and marks stay on this thread's one connection. A
    # claim is taken only when a thread is free, so none ages in a queue towards the send window.
    with addresses.client() as http, ThreadPoolExecutor(threads, "webhook") as pool:
        while waiting or running:
            while waiting and len(running) < threads and time.monotonic() < deadline:
                endpoint_id = waiting.popleft()
                outgoing = _claim_next(queues[endpoint_id], counts)
                if outgoing is not None:
                    running[pool.submit(_post, http, outgoing)] = outgoing
                elif queues[endpoint_id]:
                    waiting.append(endpoint_id)
            if not running:
                break
            done, _ = wait(running, return_when=FIRST_COMPLETED)
            for future in done:
                outgoing = running.pop(future)
                outcome = _record(outgoing, future.result())
                counts[outcome] += 1
                if outcome == "delivered" and queues[outgoing.delivery.endpoint.pk]:
                    waiting.append(outgoing.delivery.endpoint.pk)
    counts["deferred"] = sum(len(queue) for queue in queues.values())
    return counts


@dataclass(frozen=True)
class _Outgoing:
    delivery: Delivery
    claim: str
    body: bytes
    headers: dict[str, str]


@dataclass(frozen=True)
class _Answer:
    code: int | None = None
    error: str = ""
    body: str = ""
    elapsed_ms: int = 0
    refused: bool = False  # the URL or its address may not receive webhooks: no retry


def _claim_next(queue: deque[int], counts: dict[str, int]) -> _Outgoing | None:
    """Claim the next delivery of one endpoint's queue; None when there is nothing to send now."""
    while queue:
        delivery_id = queue.popleft()
        claim = uuid.uuid4().hex
        if not outbox.claim(
            Delivery.objects.filter(pk=delivery_id), claim, due=_due(), window=send_window()
        ):
            counts["skipped"] += 1  # another sender has it, or it is no longer due
            continue
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
        return _Outgoing(delivery, claim, body, headers)
    return None


def _post(http: httpx.Client, outgoing: _Outgoing) -> _Answer:
    """On a pool thread: the network only, no database."""
    started = time.monotonic()
    try:
        response = addresses.post(
            http, outgoing.delivery.endpoint.url, content=outgoing.body, headers=outgoing.headers
        )
    except addresses.UnsafeURL as exc:
        return _Answer(error=f"refused: {exc}", refused=True, elapsed_ms=_since(started))
    except Exception as exc:  # noqa: BLE001 - whatever broke, the attempt is logged and retried
        return _Answer(error=f"{type(exc).__name__}: {exc}", elapsed_ms=_since(started))
    code = response.status_code
    error = "" if 200 <= code < 300 else f"the endpoint answered {code}"
    return _Answer(code, error, response.text[:500], _since(started))


def _since(started: float) -> int:
    return round((time.monotonic() - started) * 1000)


def _record(outgoing: _Outgoing, answer: _Answer) -> str:
    delivery = outgoing.delivery
    event, endpoint = delivery.event, delivery.endpoint
    code, error = answer.code, mask(answer.error)[:2000]
    with bound(
        ticket_id=event.ticket_id, thread_id=event.ticket.thread_id, event_id=event.event_id
    ):
        Attempt.objects.create(
            delivery=delivery,
            status_code=code,
            error=error,
            response_body=answer.body,
            duration_ms=answer.elapsed_ms,
        )
        mine = Delivery.objects.filter(pk=delivery.pk, claimed_by=outgoing.claim)
        last = {"last_status_code": code, "last_error": error}
        if not error:
            mine.update(status=Delivery.Status.SENT, sent_at=timezone.now(), **last)
            log.info("webhook %s delivered to %s", event.event_id, endpoint.pk)
            return "delivered"
        metrics.WEBHOOK_FAILURES.inc()
        # A refused URL stays refused until an admin mends it, then presses "send again".
        if answer.refused or delivery.attempts >= settings.WEBHOOK_MAX_ATTEMPTS:
            mine.update(status=Delivery.Status.FAILED, **last)
            log.warning("webhook %s to %s failed for good: %s", event.event_id, endpoint.pk, error)
            return "failed"
        backoff = timedelta(
            seconds=settings.WEBHOOK_RETRY_BASE_SECONDS * 2 ** (delivery.attempts - 1)
        )
        retry_at = timezone.now() + min(backoff, MAX_BACKOFF)
        mine.update(status=Delivery.Status.PENDING, next_attempt_at=retry_at, **last)
        log.warning("webhook %s to %s will be retried: %s", event.event_id, endpoint.pk, error)
        return "retrying"


def send_again(delivery_ids: list[int]) -> int:
    """An admin's "send again": due now, a delivered one too (the receiver de-duplicates)."""
    return (
        Delivery.objects.filter(pk__in=delivery_ids)
        .exclude(status=Delivery.Status.SENDING)
        .update(status=Delivery.Status.PENDING, next_attempt_at=timezone.now())
    )
