"""Stripe's events in: stored once by id, handled by a worker. Events come late, twice and out of
order, so a handler re-reads from Stripe and records forward only (statuses.PROCESSOR_RANK)."""

from __future__ import annotations

import logging
from datetime import UTC, datetime, timedelta
from typing import Any

from django.conf import settings
from django.db import transaction
from django.db.models import F
from django.utils import timezone

from core.network import outside_transaction
from refunds import enqueue, money
from refunds.flow.errors import PermanentGatewayError
from refunds.models import Charge, Order, StripeEvent
from refunds.payments.stripe import StripeGateway
from refunds.services.sweep import wake_all
from refunds.statuses import PROCESSOR_GAVE_BACK, ProcessorStatus

log = logging.getLogger(__name__)

HANDLE = "refunds.tasks.handle_stripe_event"
# Events whose object is a Refund, and those whose object is a Charge (all its refunds re-read).
REFUND_EVENTS = frozenset(
    {"refund.created", "refund.updated", "refund.failed", "charge.refund.updated"}
)
CHARGE_EVENTS = frozenset({"charge.refunded"})
# Events whose object is a Dispute, re-read and recorded against its order.
DISPUTE_EVENTS = frozenset(
    {"charge.dispute.created", "charge.dispute.updated", "charge.dispute.closed"}
)


def stripe_event_receive(*, event: dict[str, Any]) -> tuple[StripeEvent, bool]:
    """Store a verified event once by its id; a worker gets it on commit. A resend is a no-op."""
    with transaction.atomic():
        row, created = StripeEvent.objects.get_or_create(
            event_id=event["id"],
            defaults={
                "type": event["type"],
                "created": datetime.fromtimestamp(int(event["created"]), tz=UTC),
                "payload": event,
            },
        )
        if created:
            enqueue.send_on_commit(HANDLE, row.pk)
    return row, created


def stripe_event_handle(event_pk: int, *, gateway: StripeGateway | None = None) -> str:
    """Handle a stored event; safe twice and at once: each write is a forward-only CAS."""
    outside_transaction("Stripe")
    row = StripeEvent.objects.filter(pk=event_pk, handled_at__isnull=True).first()
    if row is None:
        return "handled already"
    # Taken: the sweep's wake-up is spent, and the attempt counts even if this worker dies.
    StripeEvent.objects.filter(pk=row.pk).update(attempts=F("attempts") + 1, woken_at=None)
    error = ""
    try:
        outcome = _handle(row, gateway or StripeGateway())
    except PermanentGatewayError as exc:
        outcome, error = "", str(exc)
    except Exception as exc:  # noqa: BLE001 - Stripe unreachable, a 500: the sweep tries again
        log.warning("stripe event %s: not handled this time: %s", row.event_id, exc)
        StripeEvent.objects.filter(pk=row.pk).update(handle_error=str(exc)[:2000])
        return f"not handled this time: {exc}"
    StripeEvent.objects.filter(pk=row.pk, handled_at__isnull=True).update(
        handled_at=timezone.now(), outcome=outcome[:300], handle_error=error[:2000]
    )
    return outcome or error


def _handle(row: StripeEvent, gateway: StripeGateway) -> str:
    obj = (row.payload.get("data") or {}).get("object") or {}
    if row.type in REFUND_EVENTS:
        refunds = [gateway.refund_now(obj["id"])]
    elif row.type in CHARGE_EVENTS:
        refunds = gateway.refunds_of(obj["id"])
    elif row.type in DISPUTE_EVENTS:
        return dispute_record(gateway.dispute_now(obj["id"]), event=row.event_id)
    else:
        return f"{row.type}: not an event the desk reads"
    return "; ".join(refund_record(refund, event=row.event_id) for refund in refunds) or (
        "no refunds"
    )


def refund_record(refund: dict[str, Any], *, event: str = "") -> str:
    """Record on its ledger row what Stripe says now of `refund`; others are made outside."""
    refund_id = refund["id"]
    key = (refund.get("metadata") or {}).get(StripeGateway.METADATA_KEY) or ""
    paid_by = Order.objects.filter(payment_reference__in=_payments(refund))
    charge = Charge.objects.of_refund(refund_id, key, orders=paid_by).order_by("pk").first()
    if charge is None:
        return _outside_record(refund, event)
    try:
        status = ProcessorStatus(refund.get("status") or "")
    except ValueError:
        log.warning(
            "stripe event %s: refund %s has a status the desk does not know: %r",
            event,
            refund_id,
            refund.get("status"),
        )
        return f"{refund_id}: status {refund.get('status')!r} not known, nothing recorded"
    reason = (refund.get("failure_reason") or "") if status in PROCESSOR_GAVE_BACK else ""
    moved = Charge.objects.filter(pk=charge.pk).record_processor_status(status, reason)
    if not moved:
        return f"{refund_id}: {status} is behind what the desk has, kept"
    if status in PROCESSOR_GAVE_BACK and charge.status == Charge.Status.SUCCEEDED:
        # Its money came back: to a manager (hand_back.py); the sweep wakes it if this is lost.
        enqueue.advance_on_commit(charge.ticket_id)
    return f"{refund_id}: {status}" + (f" ({reason})" if reason else "")


def _outside_record(refund: dict[str, Any], event: str) -> str:
    """A refund no ledger row knows, recorded against the order whose payment it refunds."""
    payments = _payments(refund)
    order = Order.objects.filter(payment_reference__in=payments).order_by("pk").first()
    if order is None:
        log.info(
            "stripe event %s: refund %s is not the desk's and no order has its payment %s",
            event,
            refund["id"],
            sorted(payments),
        )
        return f"{refund['id']}: not the desk's, and no order has its payment: nothing recorded"
    new = money.outside_refunds_record(order.pk, [StripeGateway.as_record(refund)])
    said = "recorded" if new else "already recorded"
    return f"{refund['id']}: made outside the desk, {said} against order {order.number}"


def _payments(refund: dict[str, Any]) -> set[str]:
    """The payment of a refund or dispute, as an order may name it (PaymentIntent or Charge)."""
    return {p for p in (refund.get("payment_intent"), refund.get("charge")) if p}


def dispute_record(dispute: dict[str, Any], *, event: str = "") -> str:
    """Record against its order what Stripe says now of `dispute`; none names it: not the desk's."""
    payments = _payments(dispute)
    order = Order.objects.filter(payment_reference__in=payments).order_by("pk").first()
    if order is None:
        log.info(
            "stripe event %s: dispute %s of %s: no order", event, dispute["id"], sorted(payments)
        )
        return f"{dispute['id']}: no order has its payment, nothing recorded"
    record = StripeGateway.as_dispute(dispute)
    money.disputes_record(order.pk, [record])
    return f"{record.id}: {record.status}"


def stripe_events_recover() -> list[int]:
    """The recovery sweep's part: hand on every event stored and not handled."""
    received_before = timezone.now() - timedelta(seconds=settings.REFUNDS_SWEEP_GRACE_SECONDS)
    rows = StripeEvent.objects.needing_worker(received_before=received_before)
    return wake_all(rows, HANDLE, "Stripe event")
