"""An order the desk lacks, asked of the shop (docs/integrations.md). Never inside a
transaction: on SQLite it would hold the whole database while the shop thinks."""

from __future__ import annotations

import logging
import time
from urllib.parse import quote

import httpx
from django.conf import settings
from django.db import IntegrityError, transaction

from core.network import outside_transaction
from refunds.models import Order, OrderLine
from refunds.order_in import LineRefused, OrderIn

log = logging.getLogger(__name__)


class OrderSourceError(Exception):
    """The order source could not give an order; the message is for the person asking."""


class ShopDidNotAnswer(OrderSourceError):
    """Retryable: the shop timed out or failed (5xx) on every attempt."""


class ShopRefused(OrderSourceError):
    """Permanent: the shop refused the question (4xx) or answered something that is no order."""


def configured() -> bool:
    return bool(settings.REFUNDS_ORDER_SOURCE)


def fetch(number: str) -> Order | None:
    """The order from the shop, stored; None for no such order (404) or no order source."""
    if not configured():
        return None
    outside_transaction("the shop's order source")
    data = _ask(number)
    if data is None:
        return None
    order_in = _order_read(number, data)
    try:
        with transaction.atomic():
            order = Order.objects.create(**order_in.model_dump(exclude={"lines"}))
            OrderLine.objects.bulk_create(
                OrderLine(order=order, **line.model_dump()) for line in order_in.lines or ()
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
        if response.status_code >= 500 or response.status_code == 429:
            last = f"answered {response.status_code}"
            continue
        return _final(number, response)
    log.warning("order source: order %s: %s after %d attempts", number, last, attempts)
    raise ShopDidNotAnswer(
        f"The shop did not answer for order {number} ({last}, {attempts} attempts). "
        "Try again in a minute; if it keeps failing, tell whoever runs the shop's systems."
    )


def _final(number: str, response: httpx.Response) -> dict | None:
    """The order's JSON object, None for an order the shop does not know."""
    if response.status_code == 404:
        return None
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


def _order_read(number: str, data: dict) -> OrderIn:
    """The typed order (USD unless it names a currency; fields not ours are dropped)."""
    sent = {k: v for k, v in data.items() if k in OrderIn.model_fields}
    try:
        if str(sent.setdefault("number", number)) != number:
            raise LineRefused(f"it describes order {sent['number']!r}")
        return OrderIn.read({**sent, "currency": sent.get("currency") or "USD"}, minor_units=True)
    except LineRefused as exc:
        raise ShopRefused(f"The shop's answer for order {number} is not usable: {exc}.") from None
