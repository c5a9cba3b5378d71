"""Idempotency-Key for the API's POSTs: the same caller, endpoint, key and body within 24 hours
answer the same; after that the key is new again."""

from __future__ import annotations

import hashlib
import json
from datetime import timedelta

from django.db import IntegrityError, transaction
from django.utils import timezone

from api.models import IdempotentRequest
from refunds.services import RefundError


class IdempotencyConflict(RefundError):
    pass


IDEMPOTENCY_WINDOW = timedelta(hours=24)


def idempotent(*, user, endpoint: str, key: str, request_body: bytes, respond) -> tuple[int, dict]:
    """`respond()`'s (status, body), kept: a retry with the same key and body gets it again.
    The key is claimed (UNIQUE insert) in respond's transaction: of two concurrent requests with
    one key the second waits on the first's claim and never runs `respond()` itself."""
    digest = hashlib.sha256(request_body).hexdigest()
    IdempotentRequest.objects.filter(created_at__lt=timezone.now() - IDEMPOTENCY_WINDOW).delete()
    with transaction.atomic():
        try:
            with transaction.atomic():
                claim = IdempotentRequest.objects.create(
                    user=user,
                    endpoint=endpoint,
                    key=key,
                    request_hash=digest,
                    status_code=0,
                    response="",
                )
        except IntegrityError:
            earlier = IdempotentRequest.objects.get(user=user, endpoint=endpoint, key=key)
            if earlier.request_hash != digest:
                raise IdempotencyConflict(
                    "This Idempotency-Key was used with a different request body in the last "
                    "24 hours; use a new key for a new request."
                ) from None
            return earlier.status_code, json.loads(earlier.response)
        status_code, answer = respond()
        claim.status_code, claim.response = status_code, json.dumps(answer)
        claim.save(update_fields=["status_code", "response"])
    return status_code, answer
