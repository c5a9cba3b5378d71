"""The ledger around any gateway: money moves once per key, never past an order's balance, and
only while the run's lease epoch holds.

pay() in order:
1. Take the effect lock for the key (refunds/locks.py); if another process holds it, it is in
   the middle of this very charge: stop (EffectBusy) and let the thread be retried later.
2. For a key not paid nor under way: list the refunds the processor holds for the order's
   payment and record those the desk did not make (OutsideRefund), outside any transaction;
   list its disputes too (PaymentDispute): one still open stops the charge here (PaymentDisputed,
   a manager decides) unless a manager approved it after reading so (`dispute_seen`).
3. In one transaction, with the order locked: check the epoch; find the key's ledger row.
   Paid: return its receipt. Under way from an earlier run: its outcome is not known yet.
   None: check the charge's parts against what the ledger holds for the order (per line: units
   bought and what they cost with their tax; the shipping fee; in all: what the customer paid,
   less the refunds recorded as made outside the desk) and write a pending row with its parts.
4. An outcome not known is settled by `gateway.lookup(key)` before anything else.
5. Check the lease once more, then call the gateway, outside any transaction.
6. Record what happened, then give the effect lock back. A decline or a definite "not charged"
   frees the balance; an answer that was lost is looked up at once, and if the lookup fails too
   the row stays pending and the run stops (PaymentOutcomeUnknown): never "failed, approve
   again" while money may have moved.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import TypeVar

from django.db import InterfaceError, OperationalError, connection, transaction
from django.db.models import Max
from django.db.models.functions import Now
from langgraph.errors import GraphDrained

from core.clock import day_words
from core.network import outside_transaction
from refunds.flow import parts as refund_parts
from refunds.flow.errors import (
    ChargeRefused,
    EffectBusy,
    GatewayOutcomeUnknown,
    OverBalance,
    PaymentDisputed,
    PaymentOutcomeUnknown,
    PermanentGatewayError,
    RetryableGatewayError,
)
from refunds.flow.state import Part
from refunds.flow.words import dollars
from refunds.lease import Lease
from refunds.locks import effect_lock
from refunds.models import Charge, ChargePart, Order, OutsideRefund, PaymentDispute, Ticket
from refunds.payments import Gateway, ProcessorDispute, ProcessorRefund
from refunds.payments.receipt import processor_status_of
from refunds.statuses import PROCESSOR_GAVE_BACK, ProcessorStatus

log = logging.getLogger(__name__)
T = TypeVar("T")


def pay(
    *,
    gateway: Gateway,
    ticket_id: int,
    order_id: int,
    lease: Lease,
    key: str,
    amount_cents: int,
    parts: list[Part] | None = None,
    dispute_seen: bool = False,
) -> str:
    """Refund `parts` of the order (none: the shipping fee, for `amount_cents`) once per key.
    `dispute_seen`: a manager approved this charge after the review said the payment is
    disputed; an open dispute no longer stops it."""
    outside_transaction("the payment gateway")
    parts = refund_parts.or_shipping(parts, amount_cents)
    if refund_parts.total(parts) != amount_cents or any(p["amount_cents"] < 0 for p in parts):
        raise ValueError(f"charge {key}: its parts do not come to {amount_cents}")
    lease.check()
    with effect_lock(key) as lock:
        if not lock.held:
            raise EffectBusy(f"another process is charging {key}")
        unreadable = _processor_read(gateway, key, order_id, dispute_seen)
        row, state = _reserve(ticket_id, order_id, lease.epoch, key, amount_cents, parts)
        if state == "paid" and row.receipt:
            return row.receipt
        if unreadable is not None and state == "new":
            _settle(row, refused=f"{unreadable} (the payment's refunds could not be read)")
            raise unreadable
        if state == "unknown":
            # A run before ours sent it and never heard back.
            receipt = _look_up(gateway, key, row.payment_reference)
            if receipt:
                return _settle(row, receipt=receipt)
        lease.check()
        return _settle(row, receipt=_charge(gateway, row, key, amount_cents, lease, parts))


def _processor_read(
    gateway: Gateway, key: str, order_id: int, dispute_seen: bool
) -> PermanentGatewayError | None:
    """Before a first charge, what the processor says of the payment: its refunds made outside
    the desk and its disputes, asked before every charge, never left to an event having arrived.
    An open dispute not seen by a manager stops the charge (nothing is reserved: no money was
    asked for); an answer refused for good is returned, to be written in the ledger as a
    decline is."""
    if not _balance_to_check(key):
        return None
    try:
        outside_refunds_look_up(gateway, order_id)
        disputed = disputes_look_up(gateway, order_id)
    except PermanentGatewayError as exc:
        return exc
    if disputed and not dispute_seen:
        raise PaymentDisputed()
    return None


def _charge(
    gateway: Gateway, row: _Row, key: str, amount_cents: int, lease: Lease, parts: list[Part]
) -> str:
    """The gateway's call, once its row is reserved: its receipt, or the row settled as refused
    and the error raised. An error of any other kind may have moved the money: the key is
    looked up before it counts as not charged."""
    try:
        return gateway.charge(
            idempotency_key=key,
            amount_cents=amount_cents,
            ticket_key=lease.thread_id,
            payment_reference=row.payment_reference,
            parts=parts,
        )
    except PermanentGatewayError as exc:
        _settle(row, refused=str(exc))
        raise
    except RetryableGatewayError as exc:
        _settle(row, refused=f"not charged: {exc}")
        raise
    except Exception as exc:  # noqa: BLE001 - whatever it was, the money may have moved
        log.warning("charge %s: outcome unknown (%r); looking the key up", key, exc)
        receipt = _look_up(gateway, key, row.payment_reference)
        if not receipt:
            _settle(row, refused=f"not charged (looked up after: {exc})")
            raise RetryableGatewayError(f"{exc}; the gateway has no charge for it") from exc
        return receipt


@dataclass
class _Row:
    pk: int
    receipt: str | None
    payment_reference: str  # the order's, which the processor refunds against


def _reserve(
    ticket_id: int, order_id: int, epoch: int, key: str, amount_cents: int, parts: list[Part]
) -> tuple[_Row, str]:
    """The key's ledger row, claimed for this epoch, and what is known of it: "paid", "new" (no
    call made yet) or "unknown" (a call was made and its answer was never recorded).

    Everything needed is read with the order locked (two tickets of one order never check its
    balance at the same time; on SQLite the IMMEDIATE transaction holds the write lock), then
    the row and its parts written in the same transaction."""
    with transaction.atomic():
        row, state = _read(ticket_id, order_id, epoch, key, amount_cents, parts)
        if state == "new":
            row.pk = Charge.objects.create(
                ticket_id=ticket_id,
                order_id=order_id,
                idempotency_key=key,
                amount_cents=amount_cents,
                epoch=epoch,
            ).pk
        elif state == "refused":  # a decline before; a manager approved trying again
            Charge.objects.filter(pk=row.pk).update(
                status=Charge.Status.PENDING, epoch=epoch, error="", settled_at=None
            )
            # The key names its parts (flow/nodes/charge.py charge_key): these are the same.
            ChargePart.objects.filter(charge_id=row.pk).delete()
        if state in ("new", "refused"):
            ChargePart.objects.bulk_create(
                ChargePart(
                    charge_id=row.pk,
                    line_id=part.get("line"),
                    quantity=part.get("quantity") or 0,
                    amount_cents=part["amount_cents"],
                    restock=bool(part.get("restock")),
                )
                for part in parts
            )
    return row, "new" if state in ("new", "refused") else state


def _read(
    ticket_id: int, order_id: int, epoch: int, key: str, amount_cents: int, parts: list[Part]
) -> tuple[_Row, str]:
    """Read the key's row, the order's balance and the epoch, with the order row locked; refuse
    (GraphDrained, OverBalance) or say where the key stands: "paid", "unknown" (its epoch moved
    to ours), "refused" or "new".

    On PostgreSQL the lock is its own statement (it reads the order row only), before the sums:
    READ COMMITTED gives each statement a snapshot of its own, so the read that follows sees what
    the ticket that held the lock committed (its pending charge, a lease taken over). A read
    that waited for its own FOR UPDATE would re-check the order row only, and sum the charges as
    they were before the wait: two tickets racing for one order's last money would both be let
    through."""
    order = Order.objects.select_for_update().filter(pk=order_id).first()
    current_epoch = (
        Ticket.objects.filter(pk=ticket_id, links__order_id=order_id)
        .values_list("lease_epoch", flat=True)
        .first()
    )
    if order is None or current_epoch is None:  # the ticket was deleted under the run
        raise GraphDrained(f"ticket {ticket_id} with order {order_id} no longer exists")
    if current_epoch != epoch:
        raise GraphDrained(f"lease epoch {epoch} of ticket {ticket_id} no longer holds")
    if order.erased_at is not None:
        raise ChargeRefused(order.erased_words())
    reference = order.payment_reference
    known = Charge.objects.filter(idempotency_key=key).values_list("pk", "status", "receipt")
    found = known.first()
    if found and found[1] == Charge.Status.SUCCEEDED:
        return _Row(found[0], found[2], reference), "paid"
    if found and found[1] == Charge.Status.PENDING:
        Charge.objects.filter(pk=found[0]).update(epoch=epoch)
        return _Row(found[0], None, reference), "unknown"
    # What the ledger holds for the order but this key, and what was refunded outside the desk
    # as recorded by now by any process: read here, with the order locked.
    facts = order.facts(but_key=key)
    _check_parts(facts, parts)
    held, outside = facts["refunded_cents"], facts.get("outside_refunded_cents", 0)
    bought = order.shipping_fee_cents + sum(
        line["unit_price_cents"] * line["quantity"] + line["tax_cents"] for line in facts["lines"]
    )
    # Never beyond what the customer paid (the shop's `paid`; unknown for an order sent without
    # it: then each part's own limit above is the limit), less what was refunded outside the
    # desk. Those name no part, so with `paid` unknown they count against all the desk may
    # refund of the order (its fee and lines): a fee refunded in Stripe's dashboard is not
    # refunded twice.
    paid = order.paid_cents
    if paid is not None and amount_cents > paid - held - outside:
        raise OverBalance(_over(order, amount_cents, paid, held, outside))
    if paid is None and outside and amount_cents > bought - held - outside:
        raise OverBalance(_over(order, amount_cents, bought, held, outside, paid_known=False))
    if found:
        return _Row(found[0], None, reference), "refused"
    return _Row(0, None, reference), "new"  # no row yet: the caller writes it


def _over(
    order: Order, amount_cents: int, limit: int, held: int, outside: int, *, paid_known=True
) -> str:
    """Why a charge is over the order's balance, in the desk's words (a manager reads them)."""
    number = order.number
    left = dollars(max(limit - held - outside, 0))
    of = f"the {dollars(limit)} " + (
        "the customer paid" if paid_known else "the desk may refund of it"
    )
    said = f"order {number} has {left} left to refund of {of}"
    if outside:
        last = order.outside_refunds.holding_balance().aggregate(last=Max("made_at"))["last"]
        when = f", the last on {day_words(last.date())}" if last else ""
        said += (
            f"; {dollars(outside)} of the payment was refunded outside the desk (at the payment "
            f"processor, not by a ticket{when})"
        )
    return f"{said}; {dollars(amount_cents)} is more"


def _balance_to_check(key: str) -> bool:
    """Whether this charge's balance check is still to come: a key not paid nor under way (those
    were checked when their row was written). Read under the key's effect lock, so no other
    charge of this key moves it meanwhile."""
    found = Charge.objects.filter(idempotency_key=key).values_list("status", flat=True).first()
    return found is None or found == Charge.Status.REFUSED


def outside_refunds_look_up(gateway: Gateway, order_id: int) -> int:
    """List the processor's refunds of the order's payment and record those the desk did not
    make (outside_refunds_record); returns how many were new. The ledger's locked read (_read)
    sums what is recorded, so a refund recorded by another process meanwhile counts too.

    What is left: a refund made at the processor after this listing and before the desk's own
    refund is created (seconds apart) is not counted by this charge; both go through (the
    processor itself never refunds past what it captured). `manage.py reconcile`, run daily by
    beat, lists the payment again, records it and reports the order if it was refunded past what
    was paid."""
    return outside_refunds_record(order_id, _listed(gateway.payment_refunds, order_id, "refunds"))


def disputes_look_up(gateway: Gateway, order_id: int) -> list[ProcessorDispute]:
    """List the processor's disputes of the order's payment, record them (disputes_record) and
    return those still open."""
    listed = _listed(gateway.payment_disputes, order_id, "disputes")
    disputes_record(order_id, listed)
    return [dispute for dispute in listed if dispute.open]


def _listed(read: Callable[[str], Sequence[T]], order_id: int, what: str) -> Sequence[T]:
    """What the processor lists of the order's payment ([] when it names none). A network call,
    so made with no transaction open and no row locked."""
    reference = (
        Order.objects.filter(pk=order_id).values_list("payment_reference", flat=True).first()
    ) or ""
    if not reference.strip():
        return []
    try:
        return read(reference)
    except GatewayOutcomeUnknown as exc:  # a read moves no money: read again later
        raise RetryableGatewayError(
            f"the {what} of payment {reference} could not be read at the processor: {exc}"
        ) from exc


def disputes_record(order_id: int, listed: Sequence[ProcessorDispute]) -> int:
    """Record the disputes in `listed` against the order, once by the processor's id, with the
    status the processor says now (a dispute closes, and can be reopened by the bank's own
    review: the processor's word now is the state). Returns how many rows are new."""
    new = 0
    for dispute in listed:
        row, created = PaymentDispute.objects.get_or_create(
            processor_id=dispute.id,
            defaults={
                "order_id": order_id,
                "status": dispute.status,
                "amount_cents": dispute.amount_cents,
                "reason": dispute.reason[:100],
                "opened_at": dispute.opened_at,
            },
        )
        new += created
        if not created and row.status != dispute.status:
            PaymentDispute.objects.filter(pk=row.pk).update(status=dispute.status)
    return new


def outside_refunds_record(order_id: int, listed: Sequence[ProcessorRefund]) -> int:
    """Record against the order the refunds in `listed` (its payment's) that the desk did not
    make: no ledger row is theirs (Charge.objects.of_refund). A refund carrying the desk's key
    that is not its row's, from another desk on the same account say, is counted too. Once by
    the processor's id; a status already recorded only moves forward. Returns how many rows
    are new."""
    new = 0
    for refund in listed:
        if Charge.objects.of_refund(refund.id, refund.desk_key, orders=[order_id]).exists():
            continue
        status = _status(refund.status)
        reason = refund.failure_reason[:200] if status in PROCESSOR_GAVE_BACK else ""
        with transaction.atomic():
            row, created = OutsideRefund.objects.get_or_create(
                processor_id=refund.id,
                defaults={
                    "order_id": order_id,
                    "amount_cents": refund.amount_cents,
                    "status": status,
                    "failure_reason": reason,
                    "made_at": refund.made_at,
                },
            )
        new += created
        if not created and row.status != status:
            OutsideRefund.objects.filter(pk=row.pk).record_status(status, reason)
    if new:
        log.info("order %s: %s refund(s) made outside the desk recorded", order_id, new)
    return new


def _status(said: str) -> ProcessorStatus:
    """The processor's word as the desk keeps it; one it does not know counts as not reported
    (which holds the balance: never read as failed)."""
    try:
        return ProcessorStatus(said or "")
    except ValueError:
        return ProcessorStatus.UNKNOWN


def _check_parts(facts: dict, parts: list[Part]) -> None:
    """Refuse (OverBalance) parts beyond what was bought: per line, units and what they cost with
    their tax; the shipping fee. `facts` counts what the ledger holds for the order (paid or
    under way) but this key, read with the order locked."""
    number, fee = facts["number"], facts["fee_cents"]
    lines = {line["id"]: line for line in facts["lines"]}
    seen: set[int] = set()
    for part in parts:
        line_id = part.get("line") or 0
        if line_id in seen:
            raise OverBalance(f"order {number}: a part is given twice")
        seen.add(line_id)
        amount = part["amount_cents"]
        if not line_id:
            held_cents = facts["shipping_refunded_cents"]
            if amount > fee - held_cents:
                raise OverBalance(
                    f"order {number} has {dollars(max(fee - held_cents, 0))} left to refund of "
                    f"its {dollars(fee)} fee; {dollars(amount)} is more"
                )
            continue
        if line_id not in lines:
            raise OverBalance(f"order {number} has no line {line_id}")
        line = lines[line_id]
        title, bought, held_units = line["title"], line["quantity"], line["refunded_quantity"]
        units = part.get("quantity") or 0
        if units < 1 or held_units + units > bought:
            raise OverBalance(
                f"order {number}: {max(bought - held_units, 0)} of {bought} x {title} left to "
                f"refund; {units} is more"
            )
        left = refund_parts.line_price(
            line["unit_price_cents"], bought, line["tax_cents"], units, line["refunded_cents"]
        )
        if amount > left:
            raise OverBalance(
                f"order {number}: {units} x {title} can be refunded up to "
                f"{dollars(left)}; {dollars(amount)} is more"
            )


def _look_up(gateway: Gateway, key: str, payment_reference: str) -> str | None:
    try:
        return gateway.lookup(key, payment_reference=payment_reference)
    except Exception as exc:  # noqa: BLE001
        raise PaymentOutcomeUnknown(
            f"the outcome of charge {key} is not known and the lookup failed: {exc}"
        ) from exc


def _settle(row: _Row, *, receipt: str | None = None, refused: str = "") -> str:
    """Record the gateway's answer. A fact, so it is written whatever the lease says, and
    retried on a fresh connection if the database dropped ours meanwhile."""
    said = (
        {"status": Charge.Status.SUCCEEDED, "receipt": receipt, "error": ""}
        if receipt
        else {"status": Charge.Status.REFUSED, "error": refused[:2000]}
    )
    unpaid = Charge.objects.filter(pk=row.pk).exclude(status=Charge.Status.SUCCEEDED)
    for attempt in range(10):
        try:
            unpaid.update(**said, settled_at=Now())
            if receipt:
                _record_processor_status(row, receipt)
            break
        except (OperationalError, InterfaceError):
            if attempt == 9:
                raise
            connection.close()
            time.sleep(0.2 * (attempt + 1))
    return str(receipt or "")  # the flow's state holds a plain str


def _record_processor_status(row: _Row, receipt: str) -> None:
    """What the processor said of the refund in the same answer ("pending": started, not at the
    customer's bank yet), by the forward-only rule Stripe's events use: one of them may already
    have said more (a webhook can land before this settle), and that stands."""
    status = processor_status_of(receipt)
    try:
        Charge.objects.filter(pk=row.pk).record_processor_status(status)
    except ValueError:  # a status the desk does not know: the money moved all the same
        log.warning("charge %s: the gateway said %r of its refund; not recorded", row.pk, status)


def money_moved(ticket: Ticket | int) -> Charge | None:
    """The ticket's charge whose money moved, or may have (it holds the balance); None when none
    did."""
    ticket_id = ticket if isinstance(ticket, int) else ticket.pk
    return Charge.objects.filter(ticket_id=ticket_id).holding_balance().order_by("id").first()


def refundable_cents(order: Order) -> int:
    return max(order.shipping_fee_cents - order.refunded_cents(), 0)
