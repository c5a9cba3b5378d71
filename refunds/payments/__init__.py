"""Re-exported here because deployments name `refunds.payments.StripeGateway`."""

# ruff: noqa: F401 (the imports are what the package exports)
from __future__ import annotations

from collections.abc import Sequence
from functools import cache
from typing import Protocol

from django.conf import settings
from django.utils.module_loading import import_string

from refunds.flow.errors import PermanentGatewayError, RetryableGatewayError
from refunds.flow.state import Part
from refunds.payments.demo import DemoGateway
from refunds.payments.http import HttpGateway
from refunds.payments.receipt import Receipt
from refunds.payments.records import ProcessorDispute, ProcessorRefund
from refunds.payments.stripe import StripeGateway


class Gateway(Protocol):
    def charge(
        self,
        *,
        idempotency_key: str,
        amount_cents: int,
        ticket_key: str,
        payment_reference: str = "",
        parts: Sequence[Part] = (),
    ) -> str:
        """Refund once per key and return the receipt; a repeated key returns the first one."""
        ...

    def lookup(self, idempotency_key: str, *, payment_reference: str = "") -> str | None:
        """The receipt of the charge made with this key, or None if there was none."""
        ...

    def payment_refunds(self, payment_reference: str) -> list[ProcessorRefund]:
        """Every refund of the payment, the desk's and any made elsewhere."""
        ...

    def payment_disputes(self, payment_reference: str) -> list[ProcessorDispute]:
        """Every dispute of the payment: an open one stops a charge."""
        ...


@cache
def get_gateway() -> Gateway:
    return import_string(settings.REFUNDS_GATEWAY)()
