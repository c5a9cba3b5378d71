"""Stripe's events, stored once by id; never one unsigned, so without a secret every post is 503."""

from __future__ import annotations

import json
import logging
from typing import Any

from django.conf import settings
from django.http import HttpRequest, HttpResponse, JsonResponse
from django.views.decorators.csrf import csrf_exempt
from django.views.decorators.http import require_POST
from pydantic import BaseModel, ConfigDict, Field, ValidationError

from refunds import metrics, services

log = logging.getLogger(__name__)
YEAR_9999 = 253_402_300_799  # the last second Python's datetime holds


class _Object(BaseModel):
    id: str = Field(min_length=1, max_length=255)


class _Data(BaseModel):
    object: _Object


class EventShape(BaseModel):
    """Typed, so a signed post of another shape is refused in words, never a 500."""

    model_config = ConfigDict(strict=True)

    id: str = Field(min_length=1, max_length=255)
    type: str = Field(min_length=1, max_length=100)
    created: int = Field(ge=0, le=YEAR_9999)  # a Unix time
    data: _Data


@csrf_exempt  # Stripe signs its posts; it has no CSRF token to send
@require_POST
def webhook(request: HttpRequest) -> HttpResponse:
    import stripe

    secret = settings.STRIPE_WEBHOOK_SECRET
    if not secret:  # never take an event unsigned, in the demo either
        return _refused(
            request, 503, "not_configured", "STRIPE_WEBHOOK_SECRET is not set: no event is taken."
        )
    limit = settings.STRIPE_WEBHOOK_MAX_BODY_BYTES
    try:
        length = int(request.META.get("CONTENT_LENGTH") or 0)
    except ValueError:
        return _refused(request, 400, "malformed", "The Content-Length is not a number.")
    payload = request.read(limit + 1) if length <= limit else b""
    if length > limit or len(payload) > limit:
        return _refused(request, 413, "too_large", f"The body is over {limit} bytes.")
    try:
        # Within the tolerance; any time ahead is allowed: only the secret's holder can sign.
        stripe.WebhookSignature.verify_header(
            payload,
            request.headers.get("Stripe-Signature"),
            secret,
            tolerance=settings.STRIPE_WEBHOOK_TOLERANCE_SECONDS,
        )
        event = _event(payload)
    except stripe.SignatureVerificationError as exc:
        return _refused(request, 400, "signature", f"The signature does not check out: {exc}")
    except ValueError as exc:  # signed, but not UTF-8 JSON of an event's shape
        return _refused(request, 400, "malformed", f"Not one of Stripe's events: {exc}")
    _, created = services.stripe_event_receive(event=event)
    said = "stored" if created else "again"
    log.info("stripe event %s (%s): %s", event["id"], event["type"], said)
    return JsonResponse({"received": True, "stored": created})


def _event(payload: bytes) -> dict[str, Any]:
    """The event, or ValueError: a wrong shape, a NUL, NaN or Infinity."""
    try:
        EventShape.model_validate_json(payload)
    except ValidationError as exc:
        raise ValueError(
            "; ".join(
                f"{'.'.join(map(str, e['loc'])) or 'the body'}: {e['msg']}" for e in exc.errors()
            )
        ) from None
    event = json.loads(payload)  # its nesting was bounded by the parse above
    if "\\u0000" in json.dumps(event, allow_nan=False):  # ValueError for NaN or Infinity
        raise ValueError("it holds a NUL")
    return event


def _refused(request: HttpRequest, status: int, reason: str, message: str) -> HttpResponse:
    """Logged and counted by reason; Stripe's dashboard shows the answer's why."""
    metrics.STRIPE_EVENTS_REFUSED.labels(reason=reason).inc()
    log.warning("%s %s refused (%s): %s", request.method, request.path, status, message[:300])
    code = {400: "bad_request", 413: "payload_too_large", 503: "not_configured"}[status]
    return JsonResponse({"status": status, "code": code, "error": message}, status=status)
