"""A warehouse's or carrier's word on a return's goods, posted to /webhooks/returns/ in the body
POST /api/returns/ takes and signed as the desk signs its own deliveries (webhooks/signing.py:
`Refund-Desk-Signature: t=<unix time>,v1=<hex HMAC-SHA256>`, one scheme both ways) with
REFUNDS_RETURNS_WEBHOOK_SECRET. Without the secret there is no such webhook (404); an unsigned
post changes nothing. A delivery retried is harmless: the same word twice is `already`."""

from __future__ import annotations

import logging

from django.conf import settings
from django.core.exceptions import RequestDataTooBig
from django.http import HttpRequest, HttpResponse, JsonResponse
from django.views.decorators.csrf import csrf_exempt
from django.views.decorators.http import require_POST
from pydantic import ValidationError as BodyRefused

from api.bodies import ReturnIn
from ops.shop_webhook import body_words, refused
from refunds import services
from webhooks import signing

log = logging.getLogger(__name__)


@csrf_exempt  # the warehouse signs its posts; it has no CSRF token to send
@require_POST
def returns(request: HttpRequest) -> HttpResponse:
    body = _signed_body(request)
    if isinstance(body, HttpResponse):
        return body
    try:
        given = ReturnIn.model_validate_json(body)
    except BodyRefused as exc:
        return refused(request, 400, f"Not a return's word: {body_words(exc)}")
    try:
        arrival = services.return_arrived(**given.word(), source="webhook")
    except services.RefundError as exc:
        return refused(request, 422, str(exc))
    log.info("return %s: %s by the webhook, %s", arrival.reference, given.status, arrival.outcome)
    answer = {"ticket": arrival.ticket_id, "reference": arrival.reference}
    return JsonResponse({**answer, "outcome": arrival.outcome})


def _signed_body(request: HttpRequest) -> bytes | HttpResponse:
    """The raw body, once its signature checks out; or the refusal to answer."""
    secret = settings.REFUNDS_RETURNS_WEBHOOK_SECRET
    if not secret:  # off: as if there were no such address
        return refused(
            request, 404, "REFUNDS_RETURNS_WEBHOOK_SECRET is not set: there is no returns webhook."
        )
    try:
        body = request.body
    except RequestDataTooBig:
        limit = settings.DATA_UPLOAD_MAX_MEMORY_SIZE
        return refused(request, 413, f"The body is over {limit} bytes.")
    sent = request.headers.get(signing.HEADER, "")
    if not sent:
        return refused(
            request, 401, f"The {signing.HEADER} header is missing: the post is not signed."
        )
    try:
        signing.verify(secret, body, sent)
    except signing.BadSignature as exc:
        return refused(request, 401, f"The {signing.HEADER} signature does not check out: {exc}.")
    return body
