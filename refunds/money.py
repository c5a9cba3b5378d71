"""The ledger around any gateway: money moves once per key, never past an order's balance, and
only while the run's lease epoch holds.

pay() in order:
1. Hold the effect lock for the key (refunds/locks.py); if another process holds it, it is in the
   middle of this very charge: stop (EffectBusy) and let the thread be retried later.
2. In one transaction, with the order locked: check the epoch; find the key's ledger row. Paid:
   return its receipt. Under way from an earlier run: its outcome is not known yet. None: check
   the balance (fee minus what the ledger holds for the order) and write a pending row.
3. An outcome not known is settled by `gateway.lookup(key)` before anything else.
4. Check the lease once more, then call the gateway, outside any transaction.
5. Record what happened. A decline or a definite "not charged" frees the balance; an answer that
   was lost is looked up at once, and if the lookup fails too the row stays pending and the run
   stops (PaymentOutcomeUnknown): never "failed, approve again" while money may have moved.
"""

from __future__ import annotations

import logging
import time

from django.db import InterfaceError, OperationalError, connection, transaction
from django.db.models import Sum
from django.utils import timezone
from langgraph.errors import GraphDrained

from refunds.flow.errors import (
    EffectBusy,
    OverBalance,
    PaymentOutcomeUnknown,
    PermanentGatewayError,
    RetryableGatewayError,
)
from refunds.flow.words import dollars
from refunds.lease import Lease
from refunds.locks import effect_lock
from refunds.models import Charge, Order, Ticket
from refunds.payments import Gateway

log = logging.getLogger(__name__)


def pay(
    *, gateway: Gateway, ticket_id: int, order_id: int, lease: Lease, key: str, amount_cents: int
) -> str:
    lease.check()
    with effect_lock(key) as held:
        if not held:
            raise EffectBusy(f"another process is charging {key}")
        row, state = _reserve(ticket_id, order_id, lease.epoch, key, amount_cents)
        if state == "paid":
            return row.receipt
        if state == "unknown":
            receipt = _look_up(gateway, key)  # a run before ours sent it and never heard back
            if receipt:
                return _settle(row, receipt=receipt)
        lease.check()
        try:
            receipt = gateway.charge(
                idempotency_key=key, amount_cents=amount_cents, ticket_key=lease.thread_id
            )
        except PermanentGatewayError as exc:
            _settle(row, refused=str(exc))
            raise
        except RetryableGatewayError as exc:
            _settle(row, refused=f"not charged: {exc}")
            raise
        except Exception as exc:  # noqa: BLE001 - whatever it was, the money may have moved
            log.warning("charge %s: outcome unknown (%r); looking the key up", key, exc)
            receipt = _look_up(gateway, key)
            if not receipt:
                _settle(row, refused=f"not charged (looked up after: {exc})")
                raise RetryableGatewayError(f"{exc}; the gateway has no charge for it") from exc
        return _settle(row, receipt=receipt)


def _reserve(
    ticket_id: int, order_id: int, epoch: int, key: str, amount_cents: int
) -> tuple[Charge, str]:
    """The key's ledger row, claimed for this epoch, and what is known of it: "paid", "new" (no
    call made yet) or "unknown" (a call was made and its answer was never recorded)."""
    with transaction.atomic():
        # Lock the order: two tickets of one order never check the balance at the same time.
        # (On SQLite the transaction itself holds the write lock: IMMEDIATE mode.)
        order = Order.objects.select_for_update().get(pk=order_id)
        if not Ticket.objects.filter(pk=ticket_id, lease_epoch=epoch).exists():
            raise GraphDrained(f"lease epoch {epoch} of ticket {ticket_id} no longer holds")
        row = Charge.objects.select_for_update().filter(idempotency_key=key).first()
        if row is not None and row.status == Charge.Status.SUCCEEDED:
            return row, "paid"
        if row is not None and row.status == Charge.Status.PENDING:
            Charge.objects.filter(pk=row.pk).update(epoch=epoch)
            return row, "unknown"
        held = (
            Charge.objects.filter(order=order)
            .holding_balance()
            .exclude(idempotency_key=key)
            .aggregate(total=Sum("amount_cents"))["total"]
            or 0
        )
        balance = order.shipping_fee_cents - held
        if amount_cents > balance:
            raise OverBalance(
                f"order {order.number} has {dollars(max(balance, 0))} left to refund of its "
                f"{dollars(order.shipping_fee_cents)} fee; {dollars(amount_cents)} is more"
            )
        if row is None:
            row = Charge.objects.create(
                ticket_id=ticket_id,
                order=order,
                idempotency_key=key,
                amount_cents=amount_cents,
                epoch=epoch,
            )
        else:  # refused before (a decline); a manager approved trying again
            Charge.objects.filter(pk=row.pk).update(
                status=Charge.Status.PENDING, epoch=epoch, error="", settled_at=None
            )
            row.status, row.error = Charge.Status.PENDING, ""
    return row, "new"


def _look_up(gateway: Gateway, key: str) -> str | None:
    try:
        return gateway.lookup(key)
    except Exception as exc:  # noqa: BLE001
        raise PaymentOutcomeUnknown(
            f"the outcome of charge {key} is not known and the lookup failed: {exc}"
        ) from exc


def _settle(row: Charge, *, receipt: str | None = None, refused: str = "") -> str:
    """Record the gateway's answer. A fact, so it is written whatever the lease says, and
    retried on a fresh connection if the database dropped ours meanwhile."""
    fields = {"settled_at": timezone.now()}
    if receipt:
        fields |= {"status": Charge.Status.SUCCEEDED, "receipt": receipt, "error": ""}
    else:
        fields |= {"status": Charge.Status.REFUSED, "error": refused[:2000]}
    for attempt in range(10):
        try:
            Charge.objects.filter(pk=row.pk).exclude(status=Charge.Status.SUCCEEDED).update(
                **fields
            )
            break
        except (OperationalError, InterfaceError):
            if attempt == 9:
                raise
            connection.close()
            time.sleep(0.2 * (attempt + 1))
    return receipt or ""


def money_moved(ticket: Ticket | int) -> Charge | None:
    """The ticket's charge whose money moved, or may have; None when none did."""
    ticket_id = ticket if isinstance(ticket, int) else ticket.pk
    return Charge.objects.filter(ticket_id=ticket_id).money_moved().order_by("id").first()


def refundable_cents(order: Order) -> int:
    return max(order.shipping_fee_cents - order.refunded_cents(), 0)
