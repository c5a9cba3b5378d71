"""The outbox key as the provider's idempotency key closes mail once's one window (Resend)."""

from __future__ import annotations

from typing import Any

from anymail.backends.resend import EmailBackend as AnymailResendBackend

KEY_HEADER = "X-Refund-Key"  # the outbox key, set on every message by refunds/mail.py


class ResendBackend(AnymailResendBackend):
    """anymail's Resend backend, sending the outbox key as Resend's Idempotency-Key."""

    def build_message_payload(self, message: Any, defaults: dict) -> Any:
        payload = super().build_message_payload(message, defaults)
        key = (getattr(message, "extra_headers", None) or {}).get(KEY_HEADER)
        if key:
            payload.headers["Idempotency-Key"] = key
        return payload
