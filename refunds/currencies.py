"""Currencies in use and their minor units (Babel), and one strict reader of amounts."""

from __future__ import annotations

import re
from datetime import date
from decimal import Decimal
from functools import cache

from babel.core import get_global
from babel.numbers import (
    get_currency_name,
    get_currency_precision,
    get_currency_symbol,
    get_territory_currencies,
)

# The desk's pages show every amount in dollars, so what a reviewer types is read in them too.
from refunds.flow.words import DESK as DESK

# What a PositiveIntegerField holds; no shipping fee comes near it.
MAX_MINOR = 2**31 - 1


class BadAmount(ValueError):
    """Not money in this currency; `kind`: currency, format, negative, decimals or large."""

    def __init__(self, message: str, kind: str = "format") -> None:
        super().__init__(message)
        self.kind = kind


@cache
def currencies() -> frozenset[str]:
    """ISO 4217 codes that some territory uses as legal tender today."""
    today = date.today()
    found: set[str] = set()
    for territory in get_global("territory_currencies"):
        found.update(get_territory_currencies(territory, today, tender=True))
    return frozenset(found)


def is_currency(code: str) -> bool:
    return code in currencies()


def minor_units(code: str) -> int:
    """Digits after the decimal mark in this currency: 2 for USD, 0 for JPY, 3 for KWD."""
    return int(get_currency_precision(code))


def _pattern(decimal_mark: str, thousands: str) -> re.Pattern[str]:
    whole = r"[0-9]+"
    if thousands:
        sep = re.escape(thousands)
        whole = rf"(?:[0-9]{{1,3}}(?:{sep}[0-9]{{3}})+|[0-9]+)"
    # [0-9], never \d: \d and Decimal() take full-width digits ("１２"), which no shop means.
    return re.compile(rf"(-?)({whole})(?:{re.escape(decimal_mark)}([0-9]+))?", re.ASCII)


def to_minor(text: str, currency: str, *, decimal_mark: str = ".", thousands: str = "") -> int:
    """An amount in the currency's major unit ("8,99" with decimal_mark=",") -> minor units."""
    if not is_currency(currency):
        raise BadAmount(f"unknown currency {currency!r}", "currency")
    found = _pattern(decimal_mark, thousands).fullmatch(text.strip())
    if found is None:
        raise BadAmount(
            f"{text!r} is not an amount; write it like "
            f"{'8' + decimal_mark + '99' if minor_units(currency) else '899'}"
        )
    sign, whole, fraction = found.groups()
    digits = minor_units(currency)
    if sign:
        raise BadAmount(f"negative amount {text!r}", "negative")
    if fraction and len(fraction.rstrip("0")) > digits:
        raise BadAmount(
            f"{text!r} has more than {digits} decimal(s), the most {currency} has", "decimals"
        )
    value = Decimal(whole.replace(thousands, "")) + Decimal(f"0.{fraction or 0}")
    minor = int(value.scaleb(digits))
    if minor > MAX_MINOR:
        raise BadAmount(f"{text!r} is too large", "large")
    return minor


def read_typed(text: str, currency: str) -> int:
    """What a person typed ("$1,020.50") -> minor units; the message says what to type."""
    body = text.strip()
    symbol = get_currency_symbol(currency, locale="en_US") if is_currency(currency) else ""
    if symbol and body.startswith(symbol):
        body = body.removeprefix(symbol).lstrip()
    try:
        return to_minor(body, currency, thousands=",")
    except BadAmount as exc:
        raise BadAmount(_why_typed(text, currency, exc.kind), exc.kind) from None


def _why_typed(text: str, currency: str, kind: str) -> str:
    if kind == "currency":
        return f"{currency!r} is not a currency in use."
    digits = minor_units(currency)
    example = from_minor(
        12 * 10**digits + (50 * 10 ** (digits - 2) if digits >= 2 else 0), currency
    )
    why = {
        "negative": "it is negative",
        "decimals": f"{currency} has {digits or 'no'} digit(s) after the point",
        "large": "it is too large",
    }.get(kind, f"write it like {example}, with the digits 0-9 and at most one point")
    unit = get_currency_name(currency, count=2, locale="en")
    return f"“{text.strip()}” is not an amount in {unit}: {why}."


def from_minor(minor: int, currency: str) -> str:
    """899 USD -> "8.99", 899 JPY -> "899": the plain figure a form field shows for editing."""
    digits = minor_units(currency)
    return f"{Decimal(minor).scaleb(-digits):.{digits}f}"
