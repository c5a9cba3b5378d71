"""Payment gateways, chosen by the REFUNDS_GATEWAY dotted-path setting.

A gateway is the processor's side of the story: `charge()` moves money once per idempotency key
(a repeated key answers the first charge) and `lookup()` tells whether a key was charged. Errors
are typed (refunds.flow.errors): retryable, permanent (a decline), or an unknown outcome. The
ledger, the balance and the fencing live in refunds/money.py, around whichever gateway this is.
"""

from __future__ import annotations

import json
import secrets
import urllib.error
import urllib.parse
import urllib.request
from functools import cache
from typing import Protocol

from django.conf import settings
from django.db import IntegrityError
from django.utils.module_loading import import_string

from refunds.flow.errors import (
    GatewayError,
    GatewayOutcomeUnknown,
    PermanentGatewayError,
    RetryableGatewayError,
)

__all__ = [
    "DemoGateway",
    "Gateway",
    "GatewayError",
    "GatewayOutcomeUnknown",
    "HttpGateway",
    "PermanentGatewayError",
    "RetryableGatewayError",
    "get_gateway",
]


class Gateway(Protocol):
    def charge(self, *, idempotency_key: str, amount_cents: int, ticket_key: str) -> str:
        """Refund once per key and return the receipt; a repeated key returns the first one."""
        ...

    def lookup(self, idempotency_key: str) -> str | None:
        """The receipt of the charge made with this key, or None if there was none."""
        ...


class DemoGateway:
    """Stands in for a card processor in the demo: it keeps its own records (apart from our
    ledger), keyed by the idempotency key, and answers a repeated key with the first charge."""

    def charge(self, *, idempotency_key: str, amount_cents: int, ticket_key: str) -> str:
        from refunds.models import DemoProcessorRefund

        if amount_cents <= 0:
            raise PermanentGatewayError(f"cannot refund {amount_cents} cents")
        try:
            record, _ = DemoProcessorRefund.objects.get_or_create(
                idempotency_key=idempotency_key,
                defaults={"amount_cents": amount_cents, "receipt": f"rcpt_{secrets.token_hex(8)}"},
            )
        except IntegrityError:  # a concurrent call with the same key won the insert
            record = DemoProcessorRefund.objects.get(idempotency_key=idempotency_key)
        if record.amount_cents != amount_cents:
            raise PermanentGatewayError(
                f"idempotency key {idempotency_key} was used for {record.amount_cents} cents"
            )
        return record.receipt

    def lookup(self, idempotency_key: str) -> str | None:
        from refunds.models import DemoProcessorRefund

        return (
            DemoProcessorRefund.objects.filter(idempotency_key=idempotency_key)
            .values_list("receipt", flat=True)
            .first()
        )


class HttpGateway:
    """A client for a processor's refund API over HTTP, in the shape most processors share:
    `POST /refunds` with an `Idempotency-Key` header, `GET /refunds/<key>` to look one up.

    Set REFUNDS_GATEWAY=refunds.payments.HttpGateway and REFUNDS_GATEWAY_URL. The tests run it
    against devtools.fake_processor, a real HTTP server that counts what it is asked."""

    def __init__(self, base_url: str | None = None, timeout: float | None = None):
        self.base_url = (base_url or settings.REFUNDS_GATEWAY_URL).rstrip("/")
        self.timeout = timeout or settings.REFUNDS_GATEWAY_TIMEOUT

    def charge(self, *, idempotency_key: str, amount_cents: int, ticket_key: str) -> str:
        body = json.dumps({"amount_cents": amount_cents, "reference": ticket_key}).encode()
        status, answer = self._call(
            "POST",
            "/refunds",
            body=body,
            headers={"Idempotency-Key": idempotency_key, "Content-Type": "application/json"},
        )
        if status in (200, 201):
            return answer["receipt"]
        reason = answer.get("error", f"HTTP {status}")
        if status in (402, 409, 422, 400):
            raise PermanentGatewayError(reason)
        if status in (429, 503):
            raise RetryableGatewayError(reason)  # the processor did not start the refund
        raise GatewayOutcomeUnknown(reason)  # a 500 may have moved the money

    def lookup(self, idempotency_key: str) -> str | None:
        # One path segment, whatever the key holds: quote()'s default keeps "/", and a key with
        # one (an order number like "2024/1042") would be looked up at another address.
        path = "/refunds/" + urllib.parse.quote(idempotency_key, safe="")
        status, answer = self._call("GET", path)
        if status == 404:
            return None
        if status == 200:
            return answer["receipt"]
        raise GatewayOutcomeUnknown(answer.get("error", f"lookup answered HTTP {status}"))

    def _call(self, method: str, path: str, *, body: bytes | None = None, headers=None):
        request = urllib.request.Request(
            self.base_url + path, data=body, method=method, headers=headers or {}
        )
        try:
            with urllib.request.urlopen(request, timeout=self.timeout) as response:
                return response.status, json.loads(response.read() or b"{}")
        except urllib.error.HTTPError as exc:
            try:
                answer = json.loads(exc.read() or b"{}")
            except ValueError:
                answer = {}
            return exc.code, answer
        except urllib.error.URLError as exc:
            if isinstance(exc.reason, ConnectionRefusedError):
                raise RetryableGatewayError(f"gateway unreachable: {exc.reason}") from None
            raise GatewayOutcomeUnknown(f"gateway call failed: {exc.reason}") from None
        except (TimeoutError, ConnectionError) as exc:
            # The request may have arrived: only a lookup can tell whether money moved.
            raise GatewayOutcomeUnknown(f"no answer from the gateway: {exc!r}") from None


@cache
def get_gateway() -> Gateway:
    return import_string(settings.REFUNDS_GATEWAY)()
