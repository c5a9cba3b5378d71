"""Payment gateways, one module each (demo, http, stripe), chosen by the REFUNDS_GATEWAY
dotted-path setting: `refunds.payments.stripe.StripeGateway`, or the shorter
`refunds.payments.StripeGateway` that deployments already name.

A gateway is the processor's side of the story: `charge()` moves money once per idempotency key
(a repeated key answers the first charge) and `lookup()` tells whether a key was charged. Both are
given the order's payment reference (what the shop's processor calls the customer's payment, a
Stripe PaymentIntent for instance); gateways that do not need it ignore it. `payment_refunds()`
lists a payment's refunds, the desk's and those made elsewhere, and `payment_disputes()` its
disputes (an open one stops the charge for a manager's look). Errors are typed
(refunds.flow.errors): retryable, permanent (a decline), or an unknown outcome. The ledger, the
balance and the fencing live in refunds/money.py, around whichever gateway this is.
"""

from __future__ import annotations

from collections.abc import Sequence
from functools import cache
from typing import Protocol

from django.conf import settings
from django.utils.module_loading import import_string

from refunds.flow.errors import (
    GatewayError,
    GatewayOutcomeUnknown,
    PermanentGatewayError,
    RetryableGatewayError,
)
from refunds.flow.state import Part
from refunds.payments.demo import DemoGateway
from refunds.payments.http import HttpGateway
from refunds.payments.receipt import Receipt
from refunds.payments.records import ProcessorDispute, ProcessorRefund
from refunds.payments.stripe import StripeGateway

__all__ = [
    "DemoGateway",
    "Gateway",
    "GatewayError",
    "GatewayOutcomeUnknown",
    "HttpGateway",
    "PermanentGatewayError",
    "Receipt",
    "ProcessorDispute",
    "ProcessorRefund",
    "RetryableGatewayError",
    "StripeGateway",
    "get_gateway",
]


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
        """Refund once per key and return the receipt (a `Receipt` carrying the processor's
        status where the gateway knows it); a repeated key returns the first one."""
        ...

    def lookup(self, idempotency_key: str, *, payment_reference: str = "") -> str | None:
        """The receipt of the charge made with this key (a `Receipt` with the processor's status
        where the gateway knows it), or None if there was none."""
        ...

    def payment_refunds(self, payment_reference: str) -> list[ProcessorRefund]:
        """Every refund of the payment as the processor holds it now, the desk's and any made
        elsewhere (a dashboard, the shop's admin): the ledger counts the others before every
        charge (refunds/money.py) and `manage.py reconcile` compares them all."""
        ...

    def payment_disputes(self, payment_reference: str) -> list[ProcessorDispute]:
        """Every dispute of the payment as the processor holds it now, open or closed: an open
        one stops a charge before it is made and sends the ticket to a manager
        (refunds/money.py), since the card's bank may give the customer the money back too."""
        ...


@cache
def get_gateway() -> Gateway:
    return import_string(settings.REFUNDS_GATEWAY)()
