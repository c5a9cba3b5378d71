"""The demo's payment processor: it moves no money; production refuses it (FAKE_GATEWAYS)."""

from __future__ import annotations

import secrets
from collections.abc import Sequence

from django.db import IntegrityError, models

from refunds.flow.errors import PermanentGatewayError
from refunds.flow.state import Part
from refunds.payments.receipt import Receipt
from refunds.payments.records import DISPUTE_OPEN, ProcessorDispute, ProcessorRefund


class DemoProcessorRefund(models.Model):
    """What the demo processor remembers: its side of the story, apart from our ledger."""

    idempotency_key = models.CharField(max_length=150, unique=True)
    amount_cents = models.PositiveIntegerField()
    # The payment it gives money back from ("" for refunds from before it was kept).
    payment_reference = models.CharField(max_length=255, blank=True, default="")
    receipt = models.CharField(max_length=64, unique=True)
    created_at = models.DateTimeField(auto_now_add=True)

    class Meta:
        # Kept in the refunds app under its first name: moving the class moved no table.
        app_label = "refunds"

    def __str__(self) -> str:
        return f"{self.idempotency_key}: {self.receipt}"


class DemoProcessorDispute(models.Model):
    """What a customer's bank opens in Stripe; the demo adds one in the admin."""

    payment_reference = models.CharField(max_length=255, db_index=True)
    # Stripe's words: needs_response, under_review, ... (open), won, lost (closed).
    status = models.CharField(max_length=30, default="needs_response")
    amount_cents = models.PositiveIntegerField(default=0)
    created_at = models.DateTimeField(auto_now_add=True)

    class Meta:
        app_label = "refunds"

    def __str__(self) -> str:
        state = "open" if self.status in DISPUTE_OPEN else "closed"
        return f"{self.payment_reference}: {self.status} ({state})"


# The demo's refunds are done when it answers (there is no bank behind it): Stripe's word for it.
SETTLED = "succeeded"


class DemoGateway:
    """Its own records, keyed by idempotency key like a real processor's, apart from our ledger."""

    def charge(
        self,
        *,
        idempotency_key: str,
        amount_cents: int,
        ticket_key: str,
        payment_reference: str = "",
        parts: Sequence[Part] = (),
    ) -> Receipt:
        if amount_cents <= 0:
            raise PermanentGatewayError(f"cannot refund {amount_cents} cents")
        try:
            record, _ = DemoProcessorRefund.objects.get_or_create(
                idempotency_key=idempotency_key,
                defaults={
                    "amount_cents": amount_cents,
                    "receipt": f"rcpt_{secrets.token_hex(8)}",
                    "payment_reference": payment_reference,
                },
            )
        except IntegrityError:  # a concurrent call with the same key won the insert
            record = DemoProcessorRefund.objects.get(idempotency_key=idempotency_key)
        if record.amount_cents != amount_cents:
            raise PermanentGatewayError(
                f"idempotency key {idempotency_key} was used for {record.amount_cents} cents"
            )
        return Receipt(record.receipt, SETTLED)

    def lookup(self, idempotency_key: str, *, payment_reference: str = "") -> Receipt | None:
        receipt = (
            DemoProcessorRefund.objects.filter(idempotency_key=idempotency_key)
            .values_list("receipt", flat=True)
            .first()
        )
        return Receipt(receipt, SETTLED) if receipt else None

    def payment_refunds(self, payment_reference: str) -> list[ProcessorRefund]:
        if not payment_reference:
            return []
        rows = DemoProcessorRefund.objects.filter(payment_reference=payment_reference)
        return [
            ProcessorRefund(
                row.receipt, row.amount_cents, SETTLED, row.idempotency_key, row.created_at
            )
            for row in rows.order_by("pk")
        ]

    def payment_disputes(self, payment_reference: str) -> list[ProcessorDispute]:
        if not payment_reference:
            return []
        rows = DemoProcessorDispute.objects.filter(payment_reference=payment_reference)
        return [
            ProcessorDispute(
                id=f"dp_demo_{row.pk}",
                status=row.status,
                amount_cents=row.amount_cents,
                opened_at=row.created_at,
            )
            for row in rows.order_by("pk")
        ]
