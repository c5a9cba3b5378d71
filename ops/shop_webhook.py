"""Shopify's compliance webhooks, as an app that holds customers' data must answer them:
`customers/redact` asks the desk to forget a customer (an erasure, ops/erasure.py) and
`shop/redact` to forget the shop. Each post is signed with the app's secret,
`X-Shopify-Hmac-Sha256` = base64(HMAC-SHA256(secret, raw body)); an unsigned one changes
nothing, and without the secret every post answers 503, as Stripe's webhook does."""

from __future__ import annotations

import base64
import hashlib
import hmac
import json
import logging
from typing import Annotated, Any

from django.conf import settings
from django.core.exceptions import RequestDataTooBig, ValidationError
from django.http import HttpRequest, HttpResponse, JsonResponse
from django.views.decorators.csrf import csrf_exempt
from django.views.decorators.http import require_POST
from pydantic import BaseModel, ConfigDict, Field, PlainValidator
from pydantic import ValidationError as BodyRefused
from pydantic_core import PydanticCustomError

from api.bodies import ERASE_ORDERS_MAX, OrderNumber, email_address
from ops.erasure import erasure_request
from refunds.models import Order

log = logging.getLogger(__name__)
HEADER = "X-Shopify-Hmac-Sha256"


def signature(secret: str, body: bytes) -> str:
    """What Shopify sends in X-Shopify-Hmac-Sha256 for `body`."""
    return base64.b64encode(hmac.new(secret.encode(), body, hashlib.sha256).digest()).decode()


def _address(value: Any) -> str:
    if not isinstance(value, str):
        raise PydanticCustomError("string_type", "must be a string")
    return email_address(value)


class Customer(BaseModel):
    # Shopify adds fields over time: those the desk does not read are let through.
    model_config = ConfigDict(extra="ignore")

    email: Annotated[str, PlainValidator(_address)]


class CustomersRedact(BaseModel):
    model_config = ConfigDict(extra="ignore")

    shop_domain: str = Field("", max_length=255)
    customer: Customer
    # Shopify names every order of the customer's; the desk's order numbers are the shop's.
    orders_to_redact: list[OrderNumber] = Field([], max_length=ERASE_ORDERS_MAX)


@csrf_exempt  # Shopify signs its posts; it has no CSRF token to send
@require_POST
def customers_redact(request: HttpRequest) -> HttpResponse:
    body = _signed_body(request)
    if isinstance(body, HttpResponse):
        return body
    try:
        asked = CustomersRedact.model_validate_json(body)
    except BodyRefused as exc:
        return refused(request, 400, f"Not Shopify's customers/redact: {body_words(exc)}")
    # The orders the desk lacks are not this desk's to erase; their customer's other orders are.
    held = Order.objects.filter(number__in=asked.orders_to_redact).values_list("number", flat=True)
    try:
        erasure = erasure_request(
            email=asked.customer.email,
            orders=list(held),
            by=f"shop {asked.shop_domain}".strip(),
        )
    except ValidationError as exc:
        return refused(request, 422, " ".join(exc.messages))
    log.info("shop %s: customers/redact is erasure %s", asked.shop_domain, erasure.pk)
    return JsonResponse({"erasure": erasure.pk, "status": erasure.status})


@csrf_exempt
@require_POST
def shop_redact(request: HttpRequest) -> HttpResponse:
    """Taken and logged, nothing erased: the desk serves one shop, and forgetting all of it is
    the operator's decision (docs/integrations.md), not a post's."""
    body = _signed_body(request)
    if isinstance(body, HttpResponse):
        return body
    try:
        domain = str(json.loads(body).get("shop_domain", ""))[:255]
    except (ValueError, AttributeError):
        return refused(request, 400, "Not Shopify's shop/redact: the body is not a JSON object.")
    log.warning(
        "shop %s asked to erase the shop's data (shop/redact): nothing was erased; the desk "
        "holds one shop's data, and an operator erases it (manage.py erase_customer, or the "
        "database itself when the desk is retired)",
        domain or "(unnamed)",
    )
    return JsonResponse({"received": True, "erased": False})


def _signed_body(request: HttpRequest) -> bytes | HttpResponse:
    """The raw body, once its signature checks out; or the refusal to answer."""
    secret = settings.REFUNDS_SHOP_WEBHOOK_SECRET
    if not secret:  # never take a request unsigned
        return refused(
            request,
            503,
            "REFUNDS_SHOP_WEBHOOK_SECRET is not set: no request of the shop's is taken.",
        )
    try:
        body = request.body
    except RequestDataTooBig:
        limit = settings.DATA_UPLOAD_MAX_MEMORY_SIZE
        return refused(request, 413, f"The body is over {limit} bytes.")
    sent = request.headers.get(HEADER, "")
    if not sent:
        return refused(request, 401, f"The {HEADER} header is missing: the post is not signed.")
    if not hmac.compare_digest(sent.strip().encode(), signature(secret, body).encode()):
        return refused(request, 401, f"The {HEADER} signature does not check out.")
    return body


def body_words(exc: BodyRefused) -> str:
    """What is wrong with a signed body, field by field (the returns webhook's too)."""
    return "; ".join(
        f"{'.'.join(map(str, e['loc'])) or 'the body'}: {e['msg']}" for e in exc.errors()
    )


def refused(request: HttpRequest, status: int, message: str) -> HttpResponse:
    """An inbound webhook's refusal, logged and answered in one small JSON shape."""
    log.warning("%s %s refused (%s): %s", request.method, request.path, status, message[:300])
    return JsonResponse({"status": status, "error": message}, status=status)
