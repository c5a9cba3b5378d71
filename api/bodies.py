"""What the API reads, as Pydantic models that forbid unnamed fields; /api/schema/ is generated
from them, and api.errors answers their ValidationError as a 400 naming each field."""

from __future__ import annotations

from datetime import datetime
from typing import Annotated, Any, Literal

from django.conf import settings
from django.core.exceptions import ValidationError as NotAnAddress
from django.core.validators import validate_email
from pydantic import (
    AfterValidator,
    BaseModel,
    ConfigDict,
    Field,
    PlainValidator,
    ValidationError,
    WithJsonSchema,
    WrapValidator,
    model_validator,
)
from pydantic_core import PydanticCustomError

from api.parsers import MAX_NUMBER_DIGITS
from refunds.models import ORDER_NUMBER_MAX, ORDER_NUMBER_PATTERN, order_number_read
from refunds.services import NOTE_MAX, REASON_MAX, Back
from refunds.services import returns as returns_service
from refunds.services import tickets as tickets_service
from refunds.statuses import TicketStatus

ORDERS_MAX = tickets_service.ORDERS_MAX  # orders one ticket may cover


class Body(BaseModel):
    """Only the fields its model names, each of its JSON type: no "true" read as a boolean."""

    model_config = ConfigDict(extra="forbid", strict=True)


def _no_nul(text: str) -> str:
    if "\x00" in text:  # PostgreSQL text cannot hold one
        raise PydanticCustomError("null_character", "Null characters are not allowed.")
    return text


NO_NUL = {"not": {"pattern": r"\u0000"}}
Text = Annotated[str, AfterValidator(_no_nul), Field(json_schema_extra=NO_NUL)]


def _whole(words: str) -> WrapValidator:
    def read(value: Any, handler: Any) -> int:
        if isinstance(value, bool) or not isinstance(value, int):
            raise PydanticCustomError("whole_number", words)
        return handler(value)

    return WrapValidator(read)


# The body's parser refuses a number of more digits.
BIGGEST = 10**MAX_NUMBER_DIGITS - 1
WHOLE = "must be a whole number, a JSON integer such as 2"
WholeNumber = Annotated[int, Field(ge=-BIGGEST, le=BIGGEST), _whole(WHOLE)]
CENTS = "must be whole cents, a JSON integer such as 1250"
WholeCents = Annotated[int, Field(ge=1, le=BIGGEST), _whole(CENTS)]

# What refunds.models.order_number_read takes: text of its pattern, or a whole number's digits.
ORDER_NUMBER = {
    "oneOf": [
        {"type": "string", "pattern": ORDER_NUMBER_PATTERN},
        {"type": "integer", "minimum": -BIGGEST, "maximum": BIGGEST},
    ]
}


def _order_number(value: Any) -> str:
    if isinstance(value, bool) or not isinstance(value, str | int):
        raise PydanticCustomError("string_type", "must be a string")
    return order_number_read(value)


OrderNumber = Annotated[str, PlainValidator(_order_number), WithJsonSchema(ORDER_NUMBER)]


class TicketOpen(Body):
    """Open a refund ticket for an order (`order_number`) or for several of one customer's
    (`order_numbers`): one of the two."""

    model_config = ConfigDict(
        json_schema_extra={
            "oneOf": [{"required": ["order_number"]}, {"required": ["order_numbers"]}]
        }
    )

    order_number: OrderNumber = Field(
        default_factory=str, description="The order to refund the shipping fee of."
    )
    order_numbers: list[OrderNumber] = Field(
        default_factory=list,
        min_length=1,
        max_length=ORDERS_MAX,
        description="Instead of order_number: several orders of one customer, one ticket for "
        f"them all (the first is its order_number; at most {ORDERS_MAX}).",
    )
    note: Text = Field("", max_length=NOTE_MAX, description="What the customer said.")

    @model_validator(mode="after")
    def one_of_two(self) -> TicketOpen:
        given = {"order_number", "order_numbers"} & self.model_fields_set
        if len(given) == 2:
            raise ValueError("Give order_number or order_numbers, not both.")
        if not given:
            raise ValidationError.from_exception_data(
                "TicketOpen",
                [
                    {
                        "type": PydanticCustomError(
                            "missing", "Missing field: order_number (or order_numbers, a list)"
                        ),
                        "loc": ("order_number",),
                        "input": None,
                    }
                ],
            )
        return self


def _given_or_absent(schema: dict[str, Any]) -> None:
    """A query parameter is given or left out, never null."""
    for field in schema["properties"].values():
        field.update(next(o for o in field.pop("anyOf", [field]) if o != {"type": "null"}))
        field.pop("default", None)


class TicketFilter(BaseModel):
    """The list's filters, from the query string (a filter given empty is refused, not dropped)."""

    model_config = ConfigDict(json_schema_extra=_given_or_absent)

    status: TicketStatus | None = None
    order_number: Text = Field(default_factory=str, max_length=ORDER_NUMBER_MAX, pattern=r"\S")
    required_role: Literal["agent", "manager"] | None = None
    created_after: datetime | None = None
    created_before: datetime | None = None


class PartIn(Body):
    """One part of an order's refund: a line's units, the shipping fee, or the whole order."""

    line: WholeNumber | None = Field(
        None, description="The line's id (pending_review.orders[].order.lines[].id)."
    )
    quantity: Annotated[int, Field(ge=1, le=BIGGEST), _whole(WHOLE)] | None = Field(
        None, description="With `line`: how many of it, at most what is left of it."
    )
    shipping: bool | None = Field(None, description="true: the shipping fee.")
    whole_order: bool | None = Field(
        None, description="true, alone: every line's units left and the shipping fee left."
    )
    amount_cents: WholeCents | None = Field(
        None,
        description="Pay less than the part's price (a partial refund); left out: its full price.",
    )
    restock: bool | None = Field(
        None, description="With `line`: true when the item comes back to the shop."
    )


class OrderAnswerIn(Body):
    """The answer for one order of the ticket."""

    answer: Literal["approve", "reject"]
    amount_cents: WholeCents | None = Field(
        None,
        description="approve, a shorthand kept for earlier clients: pay this much of the proposal "
        "(managers; its parts scaled down to it, at most what it proposes). Expanded into "
        "`parts` before the decision is checked.",
    )
    reason: Annotated[Text, Field(max_length=REASON_MAX)] | None = Field(
        None,
        description="reject: why, for the customer (else the decision's `reason`); approve: why "
        "less than proposed, if it is.",
    )
    parts: list[PartIn] | None = Field(
        None,
        min_length=1,
        description="approve: what to refund of the order instead of the proposal "
        '(pending_review.orders[].parts), e.g. [{"line": 11, "quantity": 1}, {"shipping": '
        'true}] or [{"whole_order": true}]; their sum is the amount. A line of another order, '
        "more units than are left, an amount above a part's price or a part given twice is "
        "refused with 422 and changes nothing.",
    )


class DecisionIn(Body):
    """Answer a ticket's pending review, as a reviewer does on the desk. A decision has one
    shape, its answer per open order with the parts each approval refunds (`orders`); `answer`
    alone ("approve" as proposed, "reject" with `reason`) and `amount_cents` are shorthands
    expanded into it before it is checked, as the desk's buttons are; "ask" asks the customer
    the question in `reason` instead."""

    model_config = ConfigDict(str_strip_whitespace=True)  # as the desk's form reads them

    interrupt_id: Text = Field(
        max_length=64, description="The pending review's interrupt id (review.interrupt_id)."
    )
    answer: Literal["approve", "reject", "ask"] = Field(
        description="approve (as proposed, for every open order not in `orders`), reject (with a "
        "reason), or ask (the customer the question in `reason`)."
    )
    reason: Text = Field(
        "",
        max_length=REASON_MAX,
        description="For the customer: why, for every rejected order without its own reason (a "
        "ticket of one order: why less, for a lower approval); the question, to ask.",
    )
    note: Text = Field("", max_length=NOTE_MAX, description="Internal; never emailed.")
    amount_cents: WholeCents | None = Field(
        None,
        description="A shorthand kept for earlier clients (managers, one open order): approve "
        "this much of the proposal, its parts scaled down to it. Expanded into `orders` "
        "before the decision is checked.",
    )
    orders: dict[str, OrderAnswerIn] | None = Field(
        None,
        min_length=1,
        description="The answer per open order number (pending_review.orders), e.g. "
        '{"1042": {"answer": "approve"}, "1049": {"answer": "reject", "reason": "..."}}: a '
        "ticket of several orders, or one order approved with its own `parts`. An order left "
        "out gets `answer`; a rejection without its own reason gets `reason`.",
    )


def _max_chars(schema: dict[str, Any]) -> None:
    # Read when the schema is drawn, as intake.services.message_problems reads it per message.
    schema.update(NO_NUL, pattern=r"\S", maxLength=settings.INTAKE_MAX_CHARS)


def _text_time(value: Any, handler: Any) -> datetime:
    if not isinstance(value, str):  # lax datetimes read a number as a Unix time
        raise PydanticCustomError("datetime_type", "must be a time such as 2026-11-06T09:30:00Z")
    return handler(value)


# From the year 2000 on: the view refuses the rest with a 422 (no schema says "until tomorrow").
When = Annotated[
    datetime,
    Field(strict=False, json_schema_extra={"pattern": "^2[0-9]{3}-"}),
    WrapValidator(_text_time),
]


class MessageIn(Body):
    """A customer's message, as a helpdesk received it; the intake reads it and opens the
    ticket (or sends it to "Needs sorting")."""

    sender: Text = Field(
        max_length=254,
        json_schema_extra={"format": "email"},
        description="The customer's email address: the acknowledgment goes there, and an order "
        "the message names must be theirs.",
    )
    sender_name: Text = Field("", max_length=200, description="Their name.")
    subject: Text = Field("", max_length=998)
    body: Annotated[str, AfterValidator(_no_nul)] = Field(
        json_schema_extra=_max_chars, description="What the customer wrote, as plain text."
    )
    received_at: When | None = Field(
        None,
        description="When the customer sent it, from 2000 to a day from now; now when left out.",
    )
    to: list[Annotated[Text, Field(max_length=254)]] = Field(
        [],
        max_length=20,
        description="The addresses it was sent to: a reply to a reviewer's question, sent to the "
        "question's reply address, resumes that ticket instead of opening one.",
    )
    in_reply_to: list[Annotated[Text, Field(max_length=998)]] = Field(
        [],
        max_length=50,
        description="The Message-IDs it answers (its In-Reply-To and References): a reply to a "
        "question's email resumes that ticket.",
    )


# --- the order push (POST /api/orders/) --------------------------------------------------------
ORDERS_PUSH_MAX = 1000
# Any value: refunds.order_in.OrderIn refuses a bad order on its own, not the whole request.
ORDER_SENT = {
    "description": "An order as the shop knows it (the import's columns): order_number, "
    "customer_name, customer_email, currency (ISO 4217, in use today), shipping_fee (in "
    'the currency\'s major unit: "8.99" USD, "899" JPY; a JSON number reads the same), '
    "promised_on and delivered_on (YYYY-MM-DD), payment_reference (optional: pi_… or "
    "ch_… for Stripe). What the order holds, optional: `total` and `paid` (major unit, as "
    "shipping_fee; paid at most total) with `lines`, a list of {line_id (once per order), "
    "sku (optional), title, unit_price (major unit), quantity (whole, 1 or more), tax "
    "(optional, 0 when left out)}; the three come together or not at all, and the total "
    "must be the lines (quantity × unit_price + tax) plus the shipping fee, within 1 minor "
    "unit per line. An order sent without them keeps the lines the desk has. Any value is "
    "taken here: an order that does not fit is refused on its own in `results`, with the "
    'reason naming the line ("lines[1]: quantity must be 1 or more, not 0"), and the '
    "others go in.",
    "example": {
        "order_number": "1042",
        "customer_name": "Ana Souza",
        "customer_email": "ana@example.com",
        "currency": "USD",
        "shipping_fee": "8.99",
        "promised_on": "2026-11-02",
        "delivered_on": "2026-11-06",
        "payment_reference": "pi_3Q…",
        "total": "98.99",
        "paid": "98.99",
        "lines": [
            {
                "line_id": "L1",
                "sku": "VASE-01",
                "title": "Blue vase",
                "unit_price": "45.00",
                "quantity": 2,
                "tax": "0.00",
            }
        ],
    },
}


def _orders_sent(orders: list[Any]) -> list[Any]:
    if not orders:
        raise ValueError("orders is empty: send at least one order.")
    if len(orders) > ORDERS_PUSH_MAX:
        raise ValueError(
            f"At most {ORDERS_PUSH_MAX} orders per request; send the rest in another request."
        )
    return orders


class OrdersPush(Body):
    """Create or update up to 1,000 orders by order number."""

    orders: Annotated[
        list[Annotated[Any, WithJsonSchema(ORDER_SENT)]],
        AfterValidator(_orders_sent),
        Field(json_schema_extra={"minItems": 1, "maxItems": ORDERS_PUSH_MAX}),
    ]


# --- an erasure (POST /api/erasures/) -----------------------------------------------------------
ERASE_ORDERS_MAX = 1000
EMAIL_MAX = 254  # RFC 5321's longest path, and the Erasure's column


def email_address(text: str) -> str:
    """The address without the spaces around it; refused in words when it is not one."""
    try:
        if len(text.strip()) > EMAIL_MAX:
            raise NotAnAddress("too long")
        validate_email(text.strip())
    except NotAnAddress:
        words = f"must be an address such as ana@example.com (at most {EMAIL_MAX} characters)"
        raise PydanticCustomError("email", words) from None
    return text.strip()


class ErasureIn(Body):
    """Forget a customer: everything the desk keeps of them, under the address they write from."""

    email: Annotated[Text, AfterValidator(email_address)] = Field(
        max_length=EMAIL_MAX,
        json_schema_extra={"format": "email"},
        description="The customer's email address: their orders, tickets and messages under it "
        "are erased.",
    )
    orders: list[OrderNumber] = Field(
        [],
        max_length=ERASE_ORDERS_MAX,
        description="Order numbers the request names; each must be the desk's and this "
        "customer's (else 422, nothing erased). Their other orders are erased too.",
    )


# --- the warehouse's word on a return (POST /api/returns/, POST /webhooks/returns/) -----------
RETURN_LINES_MAX = 1000
SKU_MAX = 64  # OrderLine.sku's column


class BackIn(Body):
    """One line that came back: by its id (`line`) or its SKU, one of the two."""

    model_config = ConfigDict(
        json_schema_extra={"oneOf": [{"required": ["line"]}, {"required": ["sku"]}]}
    )

    quantity: Annotated[int, Field(ge=0, le=BIGGEST), _whole(WHOLE)] = Field(
        description="How many units of it came back, at most what was asked back."
    )
    line: WholeNumber | None = Field(
        None, description="The order line's id (GET /api/returns/<reference>/: lines[].line)."
    )
    sku: Annotated[Text, Field(min_length=1, max_length=SKU_MAX)] | None = Field(
        None, description="Or the line's SKU."
    )
    order: OrderNumber | None = Field(
        None, description="The line's order; may be left out when the return covers one order."
    )

    @model_validator(mode="after")
    def line_or_sku(self) -> BackIn:
        given = {"line", "sku"} & self.model_fields_set
        if len(given) != 1:
            raise ValueError("Name each line by its id (line) or its SKU (sku), one of the two.")
        return self


class ReturnIn(Body):
    """What the warehouse says of a return's goods: they came back ("received"), all that was
    asked back or the `lines` given, or something is wrong with them ("flagged", with a reason
    for the manager who decides again)."""

    reference: Text = Field(
        max_length=40, description="The return's reference, as on the parcel: RT-1234-56."
    )
    status: Literal["received", "flagged"]
    lines: list[BackIn] | None = Field(
        None,
        min_length=1,
        max_length=RETURN_LINES_MAX,
        description="received: what came back, line by line (a line left out: none of it); "
        "left out, everything asked back came back. Never with flagged.",
    )
    reason: Text = Field(
        "",
        max_length=returns_service.REASON_MAX,
        description="flagged: what is wrong (required); a manager reads it.",
    )

    def word(self) -> dict[str, Any]:
        """The service's keywords (refunds.services.return_arrived), each line a Back."""
        lines = None
        if self.lines is not None:
            lines = [
                Back(quantity=b.quantity, line=b.line, sku=b.sku or "", order=b.order or "")
                for b in self.lines
            ]
        return {
            "reference": self.reference,
            "status": self.status,
            "lines": lines,
            "reason": self.reason,
        }
