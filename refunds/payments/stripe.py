"""Refunds through Stripe, with the official `stripe` library."""

from __future__ import annotations

import os
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from typing import TYPE_CHECKING, Any

from django.conf import settings
from django.core.exceptions import ImproperlyConfigured

from refunds.flow import parts as refund_parts
from refunds.flow.errors import (
    GatewayOutcomeUnknown,
    PermanentGatewayError,
    RetryableGatewayError,
)
from refunds.flow.state import Part
from refunds.payments.receipt import Receipt
from refunds.payments.records import ProcessorDispute, ProcessorRefund, unix_time

if TYPE_CHECKING:
    from stripe import StripeClient
    from stripe.params import RefundCreateParams


def _of_payment(reference: str) -> Any:
    return {"limit": 100, **_stripe_payment(reference)}


class StripeGateway:
    """Our key goes in the metadata too, where `lookup()` finds it (Stripe has no Refund search).
    The library retries nothing: a retry is the ledger's, after a lookup."""

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
        parts: Sequence[Part] = (),
    ) -> Receipt:
        if amount_cents <= 0:
            raise PermanentGatewayError(f"cannot refund {amount_cents} cents")
        params: RefundCreateParams = {
            "amount": amount_cents,
            "metadata": {self.METADATA_KEY: idempotency_key, "ticket": ticket_key}
            | refund_parts.metadata(parts),
            **_stripe_payment(payment_reference),
        }
        with _stripe_errors("the refund"):
            refund = self._stripe().v1.refunds.create(
                params=params,
                options={"idempotency_key": idempotency_key},
            )
        # Stripe's word on the refund in the same answer: "pending" for days, or "succeeded".
        return Receipt(refund.id, refund.status or "")

    def lookup(self, idempotency_key: str, *, payment_reference: str = "") -> Receipt | None:
        try:
            params = _of_payment(payment_reference)
        except PermanentGatewayError:
            return None  # charge() refuses such a reference before it sends anything
        with _stripe_errors("the lookup"):
            refunds = self._stripe().v1.refunds.list(params=params)
            for refund in refunds.auto_paging_iter():
                metadata = refund.metadata.to_dict() if refund.metadata else {}
                if metadata.get(self.METADATA_KEY) == idempotency_key:
                    return Receipt(refund.id, refund.status or "")
        return None

    def refund_now(self, refund_id: str) -> dict[str, Any]:
        """The refund as Stripe holds it now: its events are never trusted for the state."""
        with _stripe_errors("reading the refund"):
            return self._stripe().v1.refunds.retrieve(refund_id).to_dict()

    def refunds_of(self, payment_reference: str) -> list[dict[str, Any]]:
        params = _of_payment(payment_reference)
        with _stripe_errors("reading the refunds"):
            listed = self._stripe().v1.refunds.list(params=params)
            return [refund.to_dict() for refund in listed.auto_paging_iter()]

    def payment_refunds(self, payment_reference: str) -> list[ProcessorRefund]:
        return [self.as_record(refund) for refund in self.refunds_of(payment_reference)]

    def dispute_now(self, dispute_id: str) -> dict[str, Any]:
        with _stripe_errors("reading the dispute"):
            return self._stripe().v1.disputes.retrieve(dispute_id).to_dict()

    def payment_disputes(self, payment_reference: str) -> list[ProcessorDispute]:
        params = _of_payment(payment_reference)
        with _stripe_errors("reading the disputes"):
            listed = self._stripe().v1.disputes.list(params=params)
            return [self.as_dispute(d.to_dict()) for d in listed.auto_paging_iter()]

    @staticmethod
    def as_dispute(dispute: dict[str, Any]) -> ProcessorDispute:
        return ProcessorDispute(
            id=dispute["id"],
            status=dispute.get("status") or "",
            amount_cents=int(dispute.get("amount") or 0),
            reason=dispute.get("reason") or "",
            opened_at=unix_time(dispute.get("created")),
        )

    @classmethod
    def as_record(cls, refund: dict[str, Any]) -> ProcessorRefund:
        return ProcessorRefund(
            id=refund["id"],
            amount_cents=int(refund.get("amount") or 0),
            status=refund.get("status") or "",
            desk_key=(refund.get("metadata") or {}).get(cls.METADATA_KEY) or "",
            made_at=unix_time(refund.get("created")),
            failure_reason=refund.get("failure_reason") or "",
        )

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


def _stripe_payment(reference: str) -> Any:
    """What a Refund names as the payment it gives money back from: which kind, and its id."""
    reference = reference.strip()
    if reference.startswith("pi_"):
        return {"payment_intent": reference}
    if reference.startswith(("ch_", "py_")):
        return {"charge": reference}
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
    message = exc.user_message or type(exc).__name__
    return f"{message} ({exc.code})" if exc.code else message
