"""The shop's orders, for a desk that does not hold them all: when a ticket names an order the
desk lacks, ticket_open asks the order source (REFUNDS_ORDER_SOURCE, a base URL) with
GET {base}/orders/{number} and stores the answer as an Order. A JSON object with the Order's
fields: number, customer_name, customer_email, promised_on, delivered_on (YYYY-MM-DD),
shipping_fee_cents (minor units), and optionally currency and payment_reference; and what the
order holds, optionally: total_cents and paid_cents with lines (line_id, sku, title,
unit_price_cents, quantity, tax_cents), read and checked by the imports' own reader
(refunds.services.orders.bought_read) and stored with the order in one transaction.

Errors by kind: a timeout, a dropped connection or a 5xx is tried again (REFUNDS_ORDER_SOURCE_
ATTEMPTS, each bounded by REFUNDS_ORDER_SOURCE_TIMEOUT) and then "the shop did not answer"
(ShopDidNotAnswer), which the person opening the ticket reads; 404 is "no such order"; any other
4xx, or an answer that is not a valid order, is permanent. Nothing is stored unless the whole
order is valid. Never called inside a database transaction (on SQLite it would hold the whole
database while the shop thinks)."""

from __future__ import annotations

import logging
import time
from dataclasses import asdict
from datetime import date
from typing import TYPE_CHECKING
from urllib.parse import quote

import httpx
from django.conf import settings
from django.core.exceptions import ValidationError
from django.core.validators import ProhibitNullCharactersValidator
from django.db import IntegrityError, transaction

from core.network import outside_transaction
from refunds.models import Order, OrderLine

if TYPE_CHECKING:
    from refunds.services.orders import Bought

log = logging.getLogger(__name__)

REQUIRED = (
    "customer_name",
    "customer_email",
    "promised_on",
    "delivered_on",
    "shipping_fee_cents",
)


class OrderSourceError(Exception):
    """The order source could not give an order; the message is for the person asking."""


class ShopDidNotAnswer(OrderSourceError):
    """Retryable: the shop timed out or failed (5xx) on every attempt."""


class ShopRefused(OrderSourceError):
    """Permanent: the shop refused the question (4xx) or answered something that is no order."""


def configured() -> bool:
    return bool(settings.REFUNDS_ORDER_SOURCE)


def fetch(number: str) -> Order | None:
    """The order from the shop, stored; None when the shop has no such order (404) or no order
    source is configured. Raises ShopDidNotAnswer or ShopRefused."""
    if not configured():
        return None
    outside_transaction("the shop's order source")
    data = _ask(number)
    if data is None:
        return None
    fields, bought = _order_fields(number, data)
    try:
        with transaction.atomic():
            order = Order.objects.create(
                number=number,
                total_cents=bought.total_cents if bought else None,
                paid_cents=bought.paid_cents if bought else None,
                **fields,
            )
            if bought:
                OrderLine.objects.bulk_create(
                    OrderLine(order=order, **asdict(line)) for line in bought.lines
                )
            return order
    except IntegrityError:  # another request stored it meanwhile
        found = Order.objects.filter(number=number).first()
        if found is None:
            raise
        return found


def _ask(number: str) -> dict | None:
    url = f"{settings.REFUNDS_ORDER_SOURCE.rstrip('/')}/orders/{quote(number, safe='')}"
    headers = {"Accept": "application/json"}
    if settings.REFUNDS_ORDER_SOURCE_TOKEN:
        headers["Authorization"] = f"Bearer {settings.REFUNDS_ORDER_SOURCE_TOKEN}"
    attempts = settings.REFUNDS_ORDER_SOURCE_ATTEMPTS
    last = ""
    for attempt in range(attempts):
        if attempt:
            time.sleep(min(0.2 * 2**attempt, 2.0))
        try:
            response = httpx.get(
                url, headers=headers, timeout=settings.REFUNDS_ORDER_SOURCE_TIMEOUT
            )
        except httpx.TimeoutException:
            last = f"no answer within {settings.REFUNDS_ORDER_SOURCE_TIMEOUT:g} s"
            continue
        except httpx.TransportError as exc:
            last = f"could not be reached ({type(exc).__name__})"
            continue
        if response.status_code == 404:
            return None
        if response.status_code >= 500 or response.status_code == 429:
            last = f"answered {response.status_code}"
            continue
        if response.status_code != 200:
            raise ShopRefused(
                f"The shop refused the lookup of order {number} ({response.status_code})."
            )
        try:
            data = response.json()
        except ValueError:
            data = None
        if not isinstance(data, dict):
            raise ShopRefused(f"The shop's answer for order {number} is not a JSON object.")
        return data
    log.warning("order source: order %s: %s after %d attempts", number, last, attempts)
    raise ShopDidNotAnswer(
        f"The shop did not answer for order {number} ({last}, {attempts} attempts). "
        "Try again in a minute; if it keeps failing, tell whoever runs the shop's systems."
    )


def _order_fields(number: str, data: dict) -> tuple[dict, Bought | None]:
    """The Order's fields from the shop's answer and what it holds (None: the shop sent no
    lines), or ShopRefused naming what is wrong."""
    from refunds.services.orders import LineRefused, bought_read

    def bad(what: str) -> ShopRefused:
        return ShopRefused(f"The shop's answer for order {number} is not usable: {what}.")

    missing = [name for name in REQUIRED if data.get(name) in (None, "")]
    if missing:
        raise bad(f"missing {', '.join(missing)}")
    if str(data.get("number", number)) != number:
        raise bad(f"it describes order {data.get('number')!r}")
    for name in ("customer_name", "customer_email", "payment_reference"):
        try:  # PostgreSQL text cannot hold a NUL: the ticket would fail with a 500
            ProhibitNullCharactersValidator()(str(data.get(name) or ""))
        except ValidationError as exc:
            raise bad(f"{name}: {' '.join(exc.messages)}") from None
    dates = {}
    for name in ("promised_on", "delivered_on"):
        try:
            dates[name] = date.fromisoformat(str(data[name]))
        except ValueError:
            raise bad(f"{name} is not a date (YYYY-MM-DD): {data[name]!r}") from None
    fee = data["shipping_fee_cents"]
    if isinstance(fee, bool) or not isinstance(fee, int) or fee < 0:
        raise bad(f"shipping_fee_cents is not a whole number of cents: {fee!r}")
    currency = str(data.get("currency") or "USD")
    if len(currency) != 3 or not currency.isalpha():
        raise bad(f"currency is not an ISO 4217 code: {currency!r}")
    email = str(data["customer_email"]).strip()
    if "@" not in email or len(email) > 254:
        raise bad(f"customer_email is not an address: {email!r}")
    try:
        bought = bought_read(
            data, currency=currency.upper(), shipping_fee_cents=fee, minor_units=True
        )
    except LineRefused as exc:
        raise bad(str(exc)) from None
    return {
        "customer_name": str(data["customer_name"])[:200],
        "customer_email": email,
        "shipping_fee_cents": fee,
        "currency": currency.upper(),
        "payment_reference": str(data.get("payment_reference") or "")[:255],
        **dates,
    }, bought
