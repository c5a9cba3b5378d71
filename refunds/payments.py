"""Payment gateways, chosen by the REFUNDS_GATEWAY dotted-path setting.

A gateway is the processor's side of the story: `charge()` moves money once per idempotency key
(a repeated key answers the first charge) and `lookup()` tells whether a key was charged. Both are
given the order's payment reference (what the shop's processor calls the customer's payment, a
Stripe PaymentIntent for instance); gateways that do not need it ignore it. Errors are typed
(refunds.flow.errors): retryable, permanent (a decline), or an unknown outcome. The ledger, the
balance and the fencing live in refunds/money.py, around whichever gateway this is.
"""

from __future__ import annotations

import json
import os
import secrets
import urllib.error
import urllib.parse
import urllib.request
from collections.abc import Iterator
from contextlib import contextmanager
from functools import cache
from typing import TYPE_CHECKING, Any, Protocol

from django.conf import settings
from django.core.exceptions import ImproperlyConfigured
from django.db import IntegrityError
from django.utils.module_loading import import_string

from refunds.flow.errors import (
    GatewayError,
    GatewayOutcomeUnknown,
    PermanentGatewayError,
    RetryableGatewayError,
)

if TYPE_CHECKING:
    from stripe import StripeClient
    from stripe.params import RefundCreateParams, RefundListParams

__all__ = [
    "DemoGateway",
    "Gateway",
    "GatewayError",
    "GatewayOutcomeUnknown",
    "HttpGateway",
    "PermanentGatewayError",
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
    ) -> str:
        """Refund once per key and return the receipt; a repeated key returns the first one."""
        ...

    def lookup(self, idempotency_key: str, *, payment_reference: str = "") -> str | None:
        """The receipt of the charge made with this key, or None if there was none."""
        ...


class DemoGateway:
    """Stands in for a card processor in the demo: it keeps its own records (apart from our
    ledger), keyed by the idempotency key, and answers a repeated key with the first charge."""

    def charge(
        self,
        *,
        idempotency_key: str,
        amount_cents: int,
        ticket_key: str,
        payment_reference: str = "",
    ) -> str:
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

    def lookup(self, idempotency_key: str, *, payment_reference: str = "") -> str | None:
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

    def charge(
        self,
        *,
        idempotency_key: str,
        amount_cents: int,
        ticket_key: str,
        payment_reference: str = "",
    ) -> str:
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

    def lookup(self, idempotency_key: str, *, payment_reference: str = "") -> str | None:
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


class StripeGateway:
    """Refunds through Stripe (the official `stripe` library): a Refund against the order's
    PaymentIntent (`pi_...`) or Charge (`ch_...`, `py_...`), for the amount the ledger asks (the
    shipping fee, or what is left of it), never the whole payment.

    Our charge key goes to Stripe twice: as the request's `Idempotency-Key` (Stripe answers a
    repeated key with the first refund for 24 hours) and in the refund's metadata, where
    `lookup()` finds it by listing the payment's refunds (Stripe has no Refund search). The
    library retries nothing (max_network_retries=0): a retry is the ledger's decision, made after
    a lookup when the outcome is unknown.

    Set REFUNDS_GATEWAY=refunds.payments.StripeGateway, STRIPE_SECRET_KEY, and optionally
    STRIPE_API_BASE and STRIPE_TIMEOUT (config/settings.py)."""

    METADATA_KEY = "refund_desk_key"

    def __init__(
        self,
        *,
        secret_key: str | None = None,
        api_base: str | None = None,
        timeout: float | None = None,
    ) -> None:
        self._secret_key = secret_key or settings.STRIPE_SECRET_KEY
        if not self._secret_key:
            raise ImproperlyConfigured("StripeGateway needs STRIPE_SECRET_KEY")
        self._api_base = (api_base or settings.STRIPE_API_BASE).rstrip("/")
        self._timeout = timeout or settings.STRIPE_TIMEOUT
        self._client: StripeClient | None = None
        self._client_pid = 0

    def __repr__(self) -> str:  # never the key (error pages show frame variables)
        return f"<StripeGateway {self._api_base}>"

    def charge(
        self,
        *,
        idempotency_key: str,
        amount_cents: int,
        ticket_key: str,
        payment_reference: str = "",
    ) -> str:
        if amount_cents <= 0:
            raise PermanentGatewayError(f"cannot refund {amount_cents} cents")
        params: RefundCreateParams = {
            "amount": amount_cents,
            "metadata": {self.METADATA_KEY: idempotency_key, "ticket": ticket_key},
        }
        kind, payment = _stripe_payment(payment_reference)
        if kind == "payment_intent":
            params["payment_intent"] = payment
        else:
            params["charge"] = payment
        with _stripe_errors("the refund"):
            refund = self._stripe().v1.refunds.create(
                params=params,
                options={"idempotency_key": idempotency_key},
            )
        return refund.id

    def lookup(self, idempotency_key: str, *, payment_reference: str = "") -> str | None:
        try:
            kind, payment = _stripe_payment(payment_reference)
        except PermanentGatewayError:
            return None  # charge() refuses such a reference before it sends anything
        params: RefundListParams = {"limit": 100}
        if kind == "payment_intent":
            params["payment_intent"] = payment
        else:
            params["charge"] = payment
        with _stripe_errors("the lookup"):
            refunds = self._stripe().v1.refunds.list(params=params)
            for refund in refunds.auto_paging_iter():
                metadata = refund.metadata.to_dict() if refund.metadata else {}
                if metadata.get(self.METADATA_KEY) == idempotency_key:
                    return refund.id
        return None

    def _stripe(self) -> StripeClient:
        import stripe

        # One client per process: a pool of connections must not be shared across a fork.
        if self._client is None or self._client_pid != os.getpid():
            self._client = stripe.StripeClient(
                self._secret_key,
                base_addresses={"api": self._api_base},
                max_network_retries=0,
                http_client=stripe.HTTPXClient(timeout=self._timeout, allow_sync_methods=True),
            )
            self._client_pid = os.getpid()
        return self._client


def _stripe_payment(reference: str) -> tuple[str, str]:
    """What a Refund names as the payment it gives money back from: which kind, and its id."""
    reference = reference.strip()
    if reference.startswith("pi_"):
        return "payment_intent", reference
    if reference.startswith(("ch_", "py_")):
        return "charge", reference
    if not reference:
        raise PermanentGatewayError("the order has no payment reference for Stripe")
    raise PermanentGatewayError(
        f"payment reference {reference!r} is neither a Stripe PaymentIntent (pi_...) "
        "nor a Charge (ch_...)"
    )


@contextmanager
def _stripe_errors(what: str) -> Iterator[None]:
    """Stripe's errors, typed by what they mean for the money."""
    import httpx
    import stripe

    try:
        yield
    except (stripe.CardError, stripe.InvalidRequestError) as exc:
        # Stripe validated the request and said no: nothing was refunded.
        raise PermanentGatewayError(f"Stripe refused {what}: {_said(exc)}") from None
    except (stripe.AuthenticationError, stripe.PermissionError) as exc:
        raise PermanentGatewayError(
            f"Stripe refused our API key for {what}: {_said(exc)}"
        ) from None
    except stripe.RateLimitError as exc:
        raise RetryableGatewayError(f"Stripe rate limit: {_said(exc)}") from None
    except stripe.APIConnectionError as exc:
        cause = exc.__cause__
        if isinstance(cause, httpx.ConnectError | httpx.ConnectTimeout):
            # No connection, so no request: nothing can have reached Stripe.
            raise RetryableGatewayError(f"Stripe unreachable: {type(cause).__name__}") from None
        # The request left (a read timeout, a reset): Stripe may have refunded.
        raise GatewayOutcomeUnknown(
            f"no answer from Stripe for {what}: {type(cause).__name__ if cause else exc}"
        ) from None
    except stripe.StripeError as exc:
        # A 500, an idempotency conflict, anything else: whether money moved is not known.
        raise GatewayOutcomeUnknown(f"Stripe answered {what} with: {_said(exc)}") from None


def _said(exc: Any) -> str:
    """Stripe's own message and code, without the request id."""
    message = exc.user_message or type(exc).__name__
    return f"{message} ({exc.code})" if exc.code else message


@cache
def get_gateway() -> Gateway:
    return import_string(settings.REFUNDS_GATEWAY)()
