"""One typed order input for every way an order comes in: the rules, once."""

from __future__ import annotations

import re
from collections.abc import Callable
from datetime import date
from decimal import Decimal
from typing import Annotated, Any, Self

from django.core.exceptions import ValidationError as DjangoValidationError
from django.core.validators import validate_email
from pydantic import (
    BaseModel,
    BeforeValidator,
    ConfigDict,
    Field,
    PlainValidator,
    ValidationError,
    ValidationInfo,
    model_validator,
)
from pydantic_core import PydanticCustomError

from refunds import currencies
from refunds.models import ORDER_NUMBER_MAX, order_number_read

# Minor units per line a total may be off its sum: the shop rounds each line's tax its own way.
TOTAL_TOLERANCE_PER_LINE = 1
MAX_QUANTITY = 1_000_000
ISO_DATE = re.compile(r"[0-9]{4}-[0-9]{2}-[0-9]{2}", re.ASCII)


class LineRefused(ValueError):
    """An order that cannot be taken, and `field`, the value refused ("" for the whole order)."""

    def __init__(self, message: str, *, field: str = "") -> None:
        super().__init__(message)
        self.field = field


def _refuse(why: str, field: str = "") -> PydanticCustomError:
    return PydanticCustomError("refused", "{why}", {"why": why, "field": field})


def _name(info: ValidationInfo) -> str:
    """The field as its door writes it: the order source names its amounts in cents."""
    field = info.field_name or ""
    if (info.context or {}).get("minor_units"):
        return field
    return "order_number" if field == "number" else field.removesuffix("_cents")


def _text(value: Any, info: ValidationInfo, limit: int, optional: bool = False) -> str:
    name = _name(info)
    if isinstance(value, bool) or not isinstance(value, str | int | None):
        raise _refuse(f"{name} must be text")
    text = "" if value is None else str(value).strip()
    if not text:
        if optional:
            return ""
        raise _refuse(f"missing {name}")
    if "\x00" in text:  # PostgreSQL text cannot hold one: a DataError for the whole batch
        raise _refuse(f"{name}: Null characters are not allowed.")
    if len(text) > limit:
        raise _refuse(f"{name} is too long (at most {limit} characters)")
    return text


def _text_up_to(limit: int, optional: bool = False) -> PlainValidator:
    return PlainValidator(lambda value, info: _text(value, info, limit, optional))


def _number(value: Any, info: ValidationInfo) -> str:
    text = _text(value, info, ORDER_NUMBER_MAX)
    try:
        return order_number_read(text)
    except ValueError as exc:
        raise _refuse(f"order_number: {exc}") from None


def _email(value: Any, info: ValidationInfo) -> str:
    email = _text(value, info, 254)
    try:
        validate_email(email)
    except DjangoValidationError:
        raise _refuse(f"customer_email {email!r} is not an email address") from None
    return email


def _currency(value: Any, info: ValidationInfo) -> str:
    code = _text(value, info, 3).upper()
    if not currencies.is_currency(code):
        raise _refuse(f"unknown currency {value!r}")
    # The amounts after it, the lines' too, are read in this currency.
    if info.context is not None:
        info.context["currency"] = code
    return code


def _date(value: Any, info: ValidationInfo) -> date:
    if isinstance(value, date):  # a form's field read it already
        return value
    text = _text(value, info, 10)
    try:
        if ISO_DATE.fullmatch(text):
            return date.fromisoformat(text)
    except ValueError:
        pass
    raise _refuse(f"bad date in {_name(info)}: {text!r} (write it as YYYY-MM-DD)")


def _amount(value: Any, info: ValidationInfo) -> int:
    name, context = _name(info), info.context or {}
    if value is None or value == "":
        raise _refuse(f"missing {name}")
    if context.get("minor_units"):
        if isinstance(value, bool) or not isinstance(value, int) or value < 0:
            raise _refuse(f"{name} is not a whole number of minor units (cents): {value!r}")
        if value > currencies.MAX_MINOR:
            raise _refuse(f"{name} is too large")
        return value
    if isinstance(value, bool) or not isinstance(value, str | int | Decimal | float):
        raise _refuse(f"{name} must be an amount, like 8.99")
    currency, mark = context.get("currency", ""), context.get("decimal_mark", ".")
    # A JSON number is written with a point; repr() keeps a float 8.99 as "8.99".
    if not isinstance(value, str):
        value, mark = (repr(value) if isinstance(value, float) else f"{value:f}"), "."
    try:
        if context.get("typed"):
            return currencies.read_typed(value, currency)
        return currencies.to_minor(value, currency, decimal_mark=mark)
    except currencies.BadAmount as exc:
        raise _refuse(f"{name}: {exc}") from None


def _quantity(value: Any) -> int:
    if value is None or value == "":
        raise _refuse("missing quantity")
    if isinstance(value, bool) or not isinstance(value, int):
        raise _refuse(f"quantity must be a whole number, like 2: {value!r}")
    if value < 1:
        raise _refuse(f"quantity must be 1 or more, not {value}")
    if value > MAX_QUANTITY:
        raise _refuse(f"quantity {value} is more than {MAX_QUANTITY:,}")
    return value


def _optional_amount(value: Any, info: ValidationInfo) -> int | None:
    return None if value is None or value == "" else _amount(value, info)


def _lines(value: Any) -> Any:
    if value is None or value == "":
        return None
    if not isinstance(value, list) or not value:
        raise _refuse("lines must be a list of at least one line")
    return value


def _required(alias: str | None = None) -> Any:
    """A field with no default: missing is refused by its own reader, in its own words."""
    return Field(None, alias=alias, validate_default=True)


Amount = Annotated[int, PlainValidator(_amount)]
STRICT = ConfigDict(extra="forbid", frozen=True)


class LineIn(BaseModel):
    """One line of an order; the OrderLine's field values (amounts in minor units)."""

    model_config = STRICT

    line_id: Annotated[str, _text_up_to(64)] = _required()
    sku: Annotated[str, _text_up_to(64, optional=True)] = ""
    title: Annotated[str, _text_up_to(200)] = _required()
    unit_price_cents: Amount = _required("unit_price")
    quantity: Annotated[int, PlainValidator(_quantity)] = _required()
    tax_cents: Annotated[int, PlainValidator(lambda v, i: _optional_amount(v, i) or 0)] = Field(
        0, alias="tax"
    )


class OrderIn(BaseModel):
    """An order's field values, and its lines, total and paid (None when sent without them)."""

    model_config = STRICT

    number: Annotated[str, PlainValidator(_number)] = _required("order_number")
    customer_name: Annotated[str, _text_up_to(200)] = _required()
    customer_email: Annotated[str, PlainValidator(_email)] = _required()
    currency: Annotated[str, PlainValidator(_currency)] = _required()
    shipping_fee_cents: Amount = _required("shipping_fee")
    promised_on: Annotated[date, PlainValidator(_date)] = _required()
    delivered_on: Annotated[date, PlainValidator(_date)] = _required()
    payment_reference: Annotated[str, _text_up_to(255, optional=True)] = ""
    total_cents: Annotated[int | None, PlainValidator(_optional_amount)] = Field(
        None, alias="total"
    )
    paid_cents: Annotated[int | None, PlainValidator(_optional_amount)] = Field(None, alias="paid")
    lines: Annotated[list[LineIn] | None, BeforeValidator(_lines)] = None

    @model_validator(mode="after")
    def _holds(self, info: ValidationInfo) -> Self:
        """Lines, total and paid together; each line id once; the sums add up."""
        context = info.context or {}
        suffix = "_cents" if context.get("minor_units") else ""
        total_name, paid_name = f"total{suffix}", f"paid{suffix}"
        sent = {"lines": self.lines, total_name: self.total_cents, paid_name: self.paid_cents}
        missing = [name for name, value in sent.items() if value is None]
        if len(missing) == 3:
            return self
        if missing:
            raise _refuse(
                f"missing {', '.join(missing)}: an order's lines, total and paid amount come "
                "together (leave all three out to send the order without its lines)",
                missing[0],
            )
        assert self.lines is not None and self.total_cents is not None
        assert self.paid_cents is not None
        place: Callable[[int], str] = context["place"]
        first: dict[str, int] = {}
        for i, line in enumerate(self.lines):
            if line.line_id in first:
                raise _refuse(
                    f"{place(i)}: line_id {line.line_id!r} is also {place(first[line.line_id])}'s;"
                    " a line id is given once per order",
                    f"lines[{i}].line_id",
                )
            first[line.line_id] = i

        def words(cents: int) -> str:
            return f"{currencies.from_minor(cents, self.currency)} {self.currency}"

        came_to = self.shipping_fee_cents + sum(
            line.unit_price_cents * line.quantity + line.tax_cents for line in self.lines
        )
        tolerance = TOTAL_TOLERANCE_PER_LINE * len(self.lines)
        if abs(self.total_cents - came_to) > tolerance:
            raise _refuse(
                f"{total_name} {words(self.total_cents)} does not add up: the lines (units times "
                f"unit price, plus tax) and the shipping fee come to {words(came_to)} "
                f"(at most {words(tolerance)} apart is taken)",
                total_name,
            )
        if self.paid_cents > self.total_cents:
            raise _refuse(
                f"{paid_name} {words(self.paid_cents)} is more than the {total_name} "
                f"{words(self.total_cents)}",
                paid_name,
            )
        return self

    @classmethod
    def read(
        cls,
        raw: Any,
        *,
        decimal_mark: str = ".",
        minor_units: bool = False,
        typed: bool = False,
        place: Callable[[int], str] | None = None,
    ) -> OrderIn:
        """The order, or LineRefused; `place(i)` names line i in a reason ("line 7")."""
        place = place or (lambda i: f"lines[{i}]")
        how = {"decimal_mark": decimal_mark, "minor_units": minor_units, "typed": typed}
        try:
            return cls.model_validate(
                raw, context={**how, "place": place}, by_alias=not minor_units, by_name=minor_units
            )
        except ValidationError as exc:
            raise _refusal(exc.errors(), place) from None


def _refusal(errors: list[Any], place: Callable[[int], str]) -> LineRefused:
    """The first error in the order's words, unknown fields first."""
    unknown = [e for e in errors if e["type"] == "extra_forbidden"]
    error = (unknown or errors)[0]
    loc, field = tuple(error["loc"]), error.get("ctx", {}).get("field", "")
    if error["type"] == "extra_forbidden":
        names = sorted(str(e["loc"][-1]) for e in unknown if e["loc"][:-1] == loc[:-1])
        why, loc = f"unknown field(s): {', '.join(names)}", (*loc[:-1], names[0])
    elif error["type"] == "refused":
        why = error["ctx"]["why"]
    elif loc:
        why = "a line must be an object"
    else:
        why = "a line must be an object with the order's fields"
    if field:  # the order as a whole: its reason names what it must
        return LineRefused(why, field=field)
    if loc[:1] == ("lines",) and len(loc) > 1:
        why = f"{place(loc[1])}: {why}"
    path = "".join(f"[{part}]" if isinstance(part, int) else f".{part}" for part in loc)
    return LineRefused(why, field=path.removeprefix("."))
