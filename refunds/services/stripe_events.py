"""Stripe's events in: each stored once by its id when its signature checks out
(refunds/payments/stripe_webhook.py), then handled by a worker, never in the request.

A handler never takes an event's order or payload for the refund's state: events come late, twice
and out of order, so it re-reads the refund (or the charge's refunds) from Stripe and records what
Stripe says now. What it records only moves forward (Charge.objects.record_processor_status,
statuses.PROCESSOR_RANK), so an older read that lands after a newer one changes nothing."""

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
# Events whose object is a Dispute: it is re-read and recorded against its order (PaymentDispute).
# The charge never waits for them: the ledger asks Stripe for disputes before each one.
DISPUTE_EVENTS = frozenset(
    {"charge.dispute.created", "charge.dispute.updated", "charge.dispute.closed"}
)
EVENTS = REFUND_EVENTS | CHARGE_EVENTS | DISPUTE_EVENTS
FAILED = PROCESSOR_GAVE_BACK  # with a failure reason


def stripe_event_receive(*, event: dict[str, Any]) -> tuple[StripeEvent, bool]:
    """Store a verified event once by its id and hand it to a worker when this commits. Returns
    (row, created): a resent event is the first row, created False, and changes nothing."""
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
    """Handle a stored event: re-read its refund(s) from Stripe and record what Stripe says now.
    Safe to run twice, and at once: each write is a forward-only compare-and-set. A read that
    fails for now leaves the event unhandled (the sweep hands it on); one Stripe refuses for good
    (an unknown refund) marks it handled with why."""
    outside_transaction("Stripe")
    row = StripeEvent.objects.filter(pk=event_pk, handled_at__isnull=True).first()
    if row is None:
        return "handled already"
    # Taken: the sweep's wake-up is spent, and the attempt counts even if this worker dies.
    StripeEvent.objects.filter(pk=row.pk).update(attempts=F("attempts") + 1, woken_at=None)
    try:
        outcome = _handle(row, gateway or StripeGateway())
    except PermanentGatewayError as exc:
        outcome, error = "", str(exc)
    except Exception as exc:  # noqa: BLE001 - Stripe unreachable, a 500: the sweep tries again
        log.warning("stripe event %s: not handled this time: %s", row.event_id, exc)
        StripeEvent.objects.filter(pk=row.pk).update(handle_error=str(exc)[:2000])
        return f"not handled this time: {exc}"
    else:
        error = ""
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
    """Record on our ledger row what Stripe says of `refund` (as Stripe holds it now): the row
    whose receipt is its id, or one not yet given a receipt whose key its metadata carries, of
    the order whose payment it refunds (Charge.objects.of_refund). Any other refund is not the
    desk's (made in Stripe's dashboard; one carrying our key yet on another payment, or beside
    the row's own): it is recorded as made outside the desk against the order whose payment it
    refunds, and counts against that order's balance; it never marks the row failed."""
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
    reason = (refund.get("failure_reason") or "") if status in FAILED else ""
    moved = Charge.objects.filter(pk=charge.pk).record_processor_status(status, reason)
    if not moved:
        return f"{refund_id}: {status} is behind what the desk has, kept"
    if status in FAILED and charge.status == Charge.Status.SUCCEEDED:
        # Its money came back: the ticket's thread goes back to a manager (refunds/hand_back.py);
        # the sweep wakes it too if this wake-up is lost.
        enqueue.advance_on_commit(charge.ticket_id)
    return f"{refund_id}: {status}" + (f" ({reason})" if reason else "")


def _outside_record(refund: dict[str, Any], event: str) -> str:
    """A refund no ledger row knows (made in Stripe's dashboard, say): recorded against the order
    whose payment it refunds, as the lookup before a charge and `reconcile` record one (one row
    by its id, its status moving forward only); logged when no order has that payment."""
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
    """The payment a refund gives money back from, as an order may name it (PaymentIntent or
    Charge)."""
    return {p for p in (refund.get("payment_intent"), refund.get("charge")) if p}


def dispute_record(dispute: dict[str, Any], *, event: str = "") -> str:
    """Record against its order what Stripe says now of `dispute` (money.disputes_record): the
    order whose payment is the dispute's PaymentIntent or Charge. A payment no order names is
    not the desk's: nothing is recorded."""
    payments = [dispute.get(k) for k in ("payment_intent", "charge") if dispute.get(k)]
    order_id = (
        Order.objects.filter(payment_reference__in=payments)
        .order_by("pk")
        .values_list("pk", flat=True)
        .first()
    )
    if order_id is None:
        log.info("stripe event %s: dispute %s of %s: no order", event, dispute["id"], payments)
        return f"{dispute['id']}: no order has its payment, nothing recorded"
    record = StripeGateway.as_dispute(dispute)
    money.disputes_record(order_id, [record])
    return f"{record.id}: {record.status}"


def stripe_events_recover() -> list[int]:
    """The recovery sweep's part for Stripe's events: hand on every event stored and not handled
    (a lost wake-up, a worker killed mid-handle, a read that failed), once per rewake interval."""
    received_before = timezone.now() - timedelta(seconds=settings.REFUNDS_SWEEP_GRACE_SECONDS)
    rows = StripeEvent.objects.needing_worker(received_before=received_before)
    return wake_all(rows, HANDLE, "Stripe event")
