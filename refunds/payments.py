"""The payment gateway, chosen by the REFUNDS_GATEWAY dotted-path setting.

Errors are typed (refunds.payments_errors): retryable ones are retried by the node's RetryPolicy,
permanent ones go to a manager. No gateway call sits inside a database transaction.
"""

from __future__ import annotations

import secrets
from functools import cache

from django.conf import settings
from django.db import IntegrityError
from django.utils.module_loading import import_string

from refunds.models import Charge, ticket_pk
from refunds.payments_errors import GatewayError, PermanentGatewayError, RetryableGatewayError
from refunds.state import Gateway

__all__ = [
    "DemoGateway",
    "GatewayError",
    "PermanentGatewayError",
    "RetryableGatewayError",
    "get_gateway",
]


class DemoGateway:
    """Stands in for a card processor. Like a real one it keys every charge by its idempotency
    key and answers a repeated key with the first charge; its record is our ledger table."""

    def charge(self, *, idempotency_key: str, amount_cents: int, ticket_key: str) -> str:
        if amount_cents <= 0:
            raise PermanentGatewayError(f"cannot charge {amount_cents} cents")
        ticket_id = ticket_pk(ticket_key)
        try:
            charge, _ = Charge.objects.get_or_create(
                idempotency_key=idempotency_key,
                defaults={
                    "ticket_id": ticket_id,
                    "amount_cents": amount_cents,
                    "receipt": f"rcpt_{secrets.token_hex(8)}",
                },
            )
        except IntegrityError:  # a concurrent call with the same key won the insert
            charge = Charge.objects.get(idempotency_key=idempotency_key)
        if charge.amount_cents != amount_cents:
            raise PermanentGatewayError(
                f"idempotency key {idempotency_key} was used for {charge.amount_cents} cents"
            )
        return charge.receipt


@cache
def get_gateway() -> Gateway:
    return import_string(settings.REFUNDS_GATEWAY)()
