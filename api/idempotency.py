"""Idempotency-Key for the API's POSTs: the same key and body within 24 hours answer the same."""

from __future__ import annotations

import hashlib
from datetime import timedelta

from django.db import IntegrityError, transaction
from django.utils import timezone

from api.models import IdempotentRequest
from refunds.services import RefundError


class IdempotencyConflict(RefundError):
    pass


IDEMPOTENCY_WINDOW = timedelta(hours=24)


def idempotent(*, user, key: str, request_body: bytes, respond) -> tuple[int, dict]:
    """Answer a request made with an Idempotency-Key: the first time, call `respond()` and keep
    its (status, body); a retry with the same key and body gets the kept response, a retry with
    another body an IdempotencyConflict. The key row and whatever `respond` writes commit in one
    transaction, so two concurrent retries cannot both open a ticket: the second waits on the
    key's UNIQUE index and then reads the first one's answer."""
    digest = hashlib.sha256(request_body).hexdigest()
    IdempotentRequest.objects.filter(created_at__lt=timezone.now() - IDEMPOTENCY_WINDOW).delete()
    for _ in range(2):
        earlier = IdempotentRequest.objects.filter(user=user, key=key).first()
        if earlier is not None:
            if earlier.request_hash != digest:
                raise IdempotencyConflict(
                    "This Idempotency-Key was used with a different request body in the last "
                    "24 hours; use a new key for a new request."
                )
            return earlier.status_code, earlier.response
        try:
            with transaction.atomic():
                status, body = respond()
                IdempotentRequest.objects.create(
                    user=user, key=key, request_hash=digest, status_code=status, response=body
                )
            return status, body
        except IntegrityError:
            continue  # a concurrent request with the same key won; read its answer
    raise RefundError("The request could not be completed; try again.")
