"""Stripe's events in, at /payments/stripe/webhook/: the signature checked with the official
library, the event stored once by its id, and 200 at once; a worker handles it
(refunds/services/stripe_events.py). Anything not signed with STRIPE_WEBHOOK_SECRET, within its
tolerance, stores nothing and answers 400; without a secret every post answers 503."""

from __future__ import annotations

import json
import logging

from django.conf import settings
from django.http import HttpRequest, HttpResponse, JsonResponse
from django.views.decorators.csrf import csrf_exempt
from django.views.decorators.http import require_POST

from refunds import metrics, services

log = logging.getLogger(__name__)


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
        # Checks the signature over the exact bytes, and that it was signed no longer than the
        # tolerance ago (the library allows any time ahead: only the secret's holder can sign).
        stripe.Webhook.construct_event(
            payload,
            request.headers.get("Stripe-Signature"),
            secret,
            tolerance=settings.STRIPE_WEBHOOK_TOLERANCE_SECONDS,
        )
    except stripe.SignatureVerificationError as exc:
        return _refused(request, 400, "signature", f"The signature does not check out: {exc}")
    except (ValueError, AttributeError) as exc:  # not JSON, or not an object: not an event
        return _refused(request, 400, "malformed", f"Not one of Stripe's events: {exc!r}")
    try:
        event = json.loads(payload)
        event_id, kind = event["id"], event["type"]
        int(event["created"])
        if not (isinstance(event_id, str) and event_id and isinstance(kind, str)):
            raise ValueError("id and type are not text")
        if not isinstance(event["data"]["object"]["id"], str):
            raise ValueError("data.object.id is not text")
    except (ValueError, KeyError, TypeError) as exc:
        return _refused(request, 400, "malformed", f"Not one of Stripe's events: {exc!r}")
    _, created = services.stripe_event_receive(event=event)
    log.info("stripe event %s (%s): %s", event_id, kind, "stored" if created else "again")
    return JsonResponse({"received": True, "stored": created})


def _refused(request: HttpRequest, status: int, reason: str, message: str) -> HttpResponse:
    """One WARNING line with why, counted by reason; the answer says why too (Stripe's dashboard
    shows it beside the failed delivery)."""
    metrics.STRIPE_EVENTS_REFUSED.labels(reason=reason).inc()
    log.warning("%s %s refused (%s): %s", request.method, request.path, status, message[:300])
    code = {
        400: "bad_request",
        413: "payload_too_large",
        503: "not_configured",
    }[status]
    return JsonResponse({"status": status, "code": code, "error": message}, status=status)
