"""The money ledger and what the processor says of it."""

from __future__ import annotations

from django.conf import settings
from django.db import models
from django.db.models import Q, Sum

from core.clock import day_words, local_words
from refunds.flow.words import dollars
from refunds.models.orders import Order, OrderLine
from refunds.payments.records import DISPUTE_OPEN
from refunds.statuses import (
    CHARGE_HOLDS_BALANCE,
    PROCESSOR_GAVE_BACK,
    PROCESSOR_ON_ITS_WAY,
    ChargeStatus,
    ProcessorStatus,
    processor_behind,
)


class ChargeQuerySet(models.QuerySet):
    def holding_balance(self) -> ChargeQuerySet:
        """Paid, or under way (maybe paid); not a refund the processor gave back."""
        return self.filter(
            status__in=[s for s, holds in CHARGE_HOLDS_BALANCE.items() if holds]
        ).exclude(processor_status__in=PROCESSOR_GAVE_BACK)

    def failed_not_handed_back(self) -> ChargeQuerySet:
        """Refunds the processor failed whose ticket has not gone back to a manager yet."""
        return self.failed_at_processor().filter(handed_back_at__isnull=True)

    def held_per_line(self) -> dict[int, tuple[int, int]]:
        """What these charges refund of each line (0: the shipping fee): units and cents."""
        rows = (
            ChargePart.objects.filter(charge__in=self)
            .values("line_id")
            .annotate(units=Sum("quantity"), cents=Sum("amount_cents"))
            .values_list("line_id", "units", "cents")
        )
        return {line or 0: (units, cents) for line, units, cents in rows}

    def on_its_way(self) -> ChargeQuerySet:
        """Refunds the processor accepted and has not finished."""
        return self.filter(status=ChargeStatus.SUCCEEDED, processor_status__in=PROCESSOR_ON_ITS_WAY)

    def failed_at_processor(self) -> ChargeQuerySet:
        """Refunds the processor accepted and then failed or canceled."""
        return self.filter(status=ChargeStatus.SUCCEEDED, processor_status__in=PROCESSOR_GAVE_BACK)

    def of_refund(
        self, refund_id: str, key: str, *, orders: models.QuerySet[Order] | list[int]
    ) -> ChargeQuerySet:
        """By receipt, or by key among `orders` before a receipt: not another refund's row."""
        unreceipted = Q(receipt__isnull=True, idempotency_key=key, order__in=orders)
        return self.filter(Q(receipt=refund_id) | unreceipted if key else Q(receipt=refund_id))

    def record_processor_status(self, status: str, failure_reason: str = "") -> int:
        """Forward only, in one compare-and-set UPDATE; how many moved."""
        status = ProcessorStatus(status)
        if status == ProcessorStatus.UNKNOWN:
            return 0
        reason = failure_reason if status in PROCESSOR_GAVE_BACK else ""
        return self.filter(processor_status__in=processor_behind(status)).update(
            processor_status=status, failure_reason=reason[:200]
        )


class Charge(models.Model):
    """Written pending before the gateway call: a repeat finds it by its UNIQUE key, and an
    unknown outcome is settled by a lookup (refunds/money.py)."""

    Status = ChargeStatus
    ProcessorStatus = ProcessorStatus

    ticket = models.ForeignKey("refunds.Ticket", on_delete=models.PROTECT, related_name="charges")
    order = models.ForeignKey(Order, on_delete=models.PROTECT, related_name="charges")
    idempotency_key = models.CharField(max_length=150, unique=True)
    amount_cents = models.PositiveIntegerField()
    status = models.CharField(max_length=10, choices=Status, default=Status.PENDING)
    receipt = models.CharField(max_length=64, unique=True, null=True, blank=True)
    error = models.TextField(blank=True)
    epoch = models.BigIntegerField(default=0)  # the lease epoch of the run that last claimed it
    created_at = models.DateTimeField(auto_now_add=True)
    settled_at = models.DateTimeField(null=True, blank=True)
    # What the processor says now ("": not known). A database default: money.py writes in SQL.
    processor_status = models.CharField(
        max_length=20,
        choices=ProcessorStatus,
        default=ProcessorStatus.UNKNOWN,
        db_default=ProcessorStatus.UNKNOWN,
        blank=True,
    )
    failure_reason = models.CharField(max_length=200, blank=True, default="", db_default="")
    handed_back_at = models.DateTimeField(null=True, blank=True)

    objects = ChargeQuerySet.as_manager()

    class Meta:
        indexes = [models.Index(fields=["order", "status"], name="charge_balance_idx")]

    def __str__(self) -> str:
        return f"{self.idempotency_key}: {dollars(self.amount_cents)} {self.status}"


class ChargePart(models.Model):
    """Written with its pending charge in one transaction, checked with the order locked."""

    charge = models.ForeignKey(Charge, on_delete=models.CASCADE, related_name="parts")
    line = models.ForeignKey(
        OrderLine, on_delete=models.PROTECT, null=True, blank=True, related_name="charge_parts"
    )  # None: the shipping fee
    quantity = models.PositiveIntegerField(default=0)  # units of the line; 0 for shipping
    amount_cents = models.PositiveIntegerField()
    restock = models.BooleanField(default=False, db_default=False)  # the item comes back

    def __str__(self) -> str:
        what = f"{self.quantity} of line {self.line_id}" if self.line_id else "shipping"
        return f"{what}: {dollars(self.amount_cents)}"


class StoreCredit(models.Model):
    """Store credit the desk issued instead of money: the credit ledger. Its money's worth is a
    Charge of the same key (the balance it took, per line); the bonus is the shop's gift."""

    key = models.CharField(max_length=150, unique=True)  # the Charge's idempotency key
    ticket = models.ForeignKey("refunds.Ticket", on_delete=models.PROTECT, related_name="+")
    order = models.ForeignKey(Order, on_delete=models.PROTECT, related_name="store_credits")
    customer_email = models.EmailField(max_length=254)
    amount_cents = models.PositiveIntegerField()  # of the order's balance
    bonus_cents = models.PositiveIntegerField(default=0)
    currency = models.CharField(max_length=3, default="USD")
    created_at = models.DateTimeField(auto_now_add=True)
    # Issued: in the ledger and, where an order source is configured, taken by the shop.
    issued_at = models.DateTimeField(null=True, blank=True)
    shop_reference = models.CharField(max_length=200, blank=True)

    def __str__(self) -> str:
        return f"Store credit {dollars(self.amount_cents + self.bonus_cents)} on {self.order}"

    @property
    def receipt(self) -> str:
        return f"credit_{self.pk}"


class OutsideRefundQuerySet(models.QuerySet):
    def holding_balance(self) -> OutsideRefundQuerySet:
        """All but those the processor failed or canceled."""
        return self.exclude(status__in=PROCESSOR_GAVE_BACK)

    def record_status(self, status: ProcessorStatus, failure_reason: str = "") -> int:
        """As Charge's record_processor_status: one compare-and-set UPDATE, forward only."""
        reason = failure_reason if status in PROCESSOR_GAVE_BACK else ""
        return self.filter(status__in=processor_behind(status)).update(
            status=status, failure_reason=reason[:200]
        )


class OutsideRefund(models.Model):
    """A refund the desk did not make: it counts against the order's balance."""

    order = models.ForeignKey(Order, on_delete=models.PROTECT, related_name="outside_refunds")
    processor_id = models.CharField(max_length=255, unique=True)  # Stripe's re_...
    amount_cents = models.PositiveIntegerField()
    # What the processor said last, moving forward only (statuses.PROCESSOR_RANK).
    status = models.CharField(max_length=20, choices=ProcessorStatus, blank=True)
    failure_reason = models.CharField(max_length=200, blank=True, default="")
    made_at = models.DateTimeField(null=True, blank=True)  # as the processor says
    recorded_at = models.DateTimeField(auto_now_add=True)

    objects = OutsideRefundQuerySet.as_manager()

    def __str__(self) -> str:
        return f"{self.processor_id}: {dollars(self.amount_cents)} outside the desk"


class PaymentDispute(models.Model):
    """The charge never waits for its event: the ledger asks the processor each time."""

    order = models.ForeignKey(Order, on_delete=models.PROTECT, related_name="disputes")
    processor_id = models.CharField(max_length=255, unique=True)  # Stripe's dp_...
    status = models.CharField(max_length=30)  # Stripe's word, as it said last
    amount_cents = models.PositiveIntegerField(default=0)
    reason = models.CharField(max_length=100, blank=True, default="")
    opened_at = models.DateTimeField(null=True, blank=True)  # as the processor says
    recorded_at = models.DateTimeField(auto_now_add=True)
    updated_at = models.DateTimeField(auto_now=True)

    def __str__(self) -> str:
        return f"{self.processor_id}: {self.status}"

    @property
    def is_open(self) -> bool:
        return self.status in DISPUTE_OPEN

    def said(self) -> str:
        """The order's line for it: "Payment disputed on Dec 3" (and how it ended)."""
        when = f" on {day_words(self.opened_at.date())}" if self.opened_at else ""
        return f"Payment disputed{when}" + ("" if self.is_open else f" ({self.status})")


class ReconcileRun(models.Model):
    """One run of `reconcile` and what it said, for /ops/reconcile/."""

    class By(models.TextChoices):
        BEAT = "beat", "the daily beat"
        COMMAND = "command", "manage.py reconcile"

    by = models.CharField(max_length=10, choices=By.choices)
    started_at = models.DateTimeField()
    finished_at = models.DateTimeField()
    since = models.DateTimeField()  # the orders charged since then were looked at
    orders = models.PositiveIntegerField(default=0)
    lines = models.JSONField(default=list)  # the report as printed (and emailed)
    problems = models.JSONField(default=list)  # each one in words, also among the lines
    open_disputes = models.JSONField(default=list)

    class Meta:
        ordering = ["-started_at", "-id"]

    def __str__(self) -> str:
        return f"reconcile by {self.by} at {local_words(self.started_at)}"

    def marked_lines(self) -> list[tuple[str, str]]:
        """Each line with what it is ("problem", "dispute" or ""), for the page to mark."""
        problems = {f"- {words}" for words in self.problems}
        disputes = {f"- {words}" for words in self.open_disputes}
        return [
            (line, "problem" if line in problems else "dispute" if line in disputes else "")
            for line in self.lines
        ]


class StripeEventQuerySet(models.QuerySet):
    def needing_worker(self, received_before=None) -> StripeEventQuerySet:
        """Events not handled yet that still have attempts left (received before a time)."""
        rows = self.filter(handled_at__isnull=True, attempts__lt=settings.REFUNDS_MAX_ATTEMPTS)
        return rows if received_before is None else rows.filter(received_at__lt=received_before)


class StripeEvent(models.Model):
    """One of Stripe's events, once by its id (a resent event is the first one)."""

    event_id = models.CharField(max_length=255, unique=True)
    type = models.CharField(max_length=100)
    created = models.DateTimeField()  # when Stripe made it
    payload = models.JSONField()
    received_at = models.DateTimeField(auto_now_add=True)
    handled_at = models.DateTimeField(null=True, blank=True)
    outcome = models.CharField(max_length=300, blank=True)  # what the handler recorded
    handle_error = models.TextField(blank=True)  # the last attempt's, while one fails
    attempts = models.PositiveIntegerField(default=0)
    woken_at = models.DateTimeField(null=True, blank=True)  # the sweep's last wake-up

    objects = StripeEventQuerySet.as_manager()

    class Meta:
        indexes = [models.Index(fields=["handled_at"], name="stripe_event_unhandled_idx")]

    def __str__(self) -> str:
        return f"{self.type} {self.event_id}"
