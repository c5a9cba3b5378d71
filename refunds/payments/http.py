"""A processor's refund API over HTTP, in the shape most processors share."""

from __future__ import annotations

import urllib.parse
from collections.abc import Sequence
from typing import Any

import httpx
from django.conf import settings

from refunds.flow import parts as refund_parts
from refunds.flow.errors import (
    GatewayOutcomeUnknown,
    PermanentGatewayError,
    RetryableGatewayError,
)
from refunds.flow.state import Part
from refunds.payments.receipt import Receipt
from refunds.payments.records import ProcessorDispute, ProcessorRefund, unix_time


class HttpGateway:
    """`POST /refunds` with an `Idempotency-Key`, `GET /refunds/<key>`, `GET /refunds?payment=`."""

    def __init__(self, base_url: str | None = None, timeout: float | None = None):
        self.base_url = (base_url or settings.REFUNDS_GATEWAY_URL).rstrip("/")
        self.timeout = timeout or settings.REFUNDS_GATEWAY_TIMEOUT

    def charge(
        self,
        *,
        idempotency_key: str,
        amount_cents: int,
        ticket_key: str,
        payment_reference: str = "",
        parts: Sequence[Part] = (),
    ) -> Receipt:
        body = {
            "amount_cents": amount_cents,
            "reference": ticket_key,
            # As Stripe's metadata says them ("11x2,shipping"), for the processor's books.
            "parts": refund_parts.metadata(parts).get("parts", ""),
            "payment": payment_reference,
        }
        status, answer = self._call(
            "POST", "/refunds", body=body, headers={"Idempotency-Key": idempotency_key}
        )
        if status in (200, 201):
            return Receipt(answer["receipt"], answer.get("status") or "")
        reason = answer.get("error", f"HTTP {status}")
        if status in (402, 409, 422, 400):
            raise PermanentGatewayError(reason)
        if status in (429, 503):
            raise RetryableGatewayError(reason)  # the processor did not start the refund
        raise GatewayOutcomeUnknown(reason)  # a 500 may have moved the money

    def lookup(self, idempotency_key: str, *, payment_reference: str = "") -> Receipt | None:
        # One path segment: quote()'s default keeps the "/" of an order number like "2024/1042".
        path = "/refunds/" + urllib.parse.quote(idempotency_key, safe="")
        status, answer = self._call("GET", path)
        if status == 404:
            return None
        if status == 200:
            return Receipt(answer["receipt"], answer.get("status") or "")
        raise GatewayOutcomeUnknown(answer.get("error", f"lookup answered HTTP {status}"))

    def payment_refunds(self, payment_reference: str) -> list[ProcessorRefund]:
        return [
            ProcessorRefund(
                id=refund["receipt"],
                amount_cents=int(refund["amount_cents"]),
                status=refund.get("status") or "",
                desk_key=refund.get("key") or "",
                made_at=unix_time(refund.get("created")),
            )
            for refund in self._listed("refunds", payment_reference)
        ]

    def payment_disputes(self, payment_reference: str) -> list[ProcessorDispute]:
        return [
            ProcessorDispute(
                id=dispute["id"],
                status=dispute.get("status") or "",
                amount_cents=int(dispute.get("amount_cents") or 0),
                reason=dispute.get("reason") or "",
                opened_at=unix_time(dispute.get("created")),
            )
            for dispute in self._listed("disputes", payment_reference)
        ]

    def _listed(self, what: str, payment_reference: str) -> list[dict]:
        query = urllib.parse.urlencode({"payment": payment_reference})
        status, answer = self._call("GET", f"/{what}?{query}")
        if status == 404 and what == "disputes":
            return []  # a processor that keeps no disputes has none to tell
        if status != 200:
            # A read moves no money: whatever went wrong, trying again later is harmless.
            raise RetryableGatewayError(answer.get("error", f"listing answered HTTP {status}"))
        return answer.get(what, [])

    def _call(self, method: str, path: str, *, body: Any = None, headers=None):
        try:
            response = httpx.request(
                method, self.base_url + path, json=body, headers=headers, timeout=self.timeout
            )
        except httpx.ConnectError as exc:  # no connection, so no request
            raise RetryableGatewayError(f"gateway unreachable: {exc}") from None
        except httpx.TransportError as exc:
            # The request may have arrived: only a lookup can tell whether money moved.
            raise GatewayOutcomeUnknown(f"no answer from the gateway: {exc!r}") from None
        try:
            return response.status_code, response.json() if response.content else {}
        except ValueError:
            if response.is_success:
                raise
            return response.status_code, {}
