"""What the API reads and writes, as DRF serializers: request validation, and the response
shapes that the OpenAPI schema (/api/schema/) publishes."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from typing import Any, Literal

from django.conf import settings
from django.core.validators import MinLengthValidator
from django.utils import timezone
from django.utils.functional import lazy
from drf_spectacular.extensions import (
    OpenApiSerializerExtension,
    OpenApiSerializerFieldExtension,
)
from drf_spectacular.utils import extend_schema_field
from rest_framework import serializers
from rest_framework.settings import api_settings

from api.errors import Unprocessable
from api.parsers import MAX_NUMBER_DIGITS
from refunds import policy
from refunds.models import (
    ORDER_NUMBER_PATTERN,
    Charge,
    Decision,
    Email,
    Ticket,
    order_number_read,
)
from refunds.selectors import REFUND_STATES, refund_progress
from refunds.services import NOTE_MAX, REASON_MAX
from refunds.services import tickets as tickets_service

NON_FIELD = api_settings.NON_FIELD_ERRORS_KEY
ORDERS_PUSH_MAX = 1000
ORDERS_MAX = tickets_service.ORDERS_MAX  # orders one ticket may cover


class OrderNumberField(serializers.Field):
    """An order number as a string, or as a whole number (helpdesks send either)."""

    default_error_messages = {
        "required": "Missing field: order_number",
        "null": "Missing field: order_number",
        "invalid": "order_number must be a string",
    }

    def to_internal_value(self, data: Any) -> str:
        if isinstance(data, bool) or not isinstance(data, str | int):
            self.fail("invalid")
        try:
            return order_number_read(data)
        except ValueError as exc:
            raise serializers.ValidationError(f"order_number: {exc}") from None

    def to_representation(self, value: str) -> str:
        return value


# What DRF's CharField refuses (CharFieldScheme): a NUL (PostgreSQL cannot hold one).
NO_NUL = {"not": {"pattern": r"\u0000"}}

# What refunds.models.order_number_read takes, stated as the same pattern it reads with.
ORDER_NUMBER_TEXT = {"type": "string", "pattern": ORDER_NUMBER_PATTERN}
# A whole number is read as its digits; the body's parser refuses one of more digits.
ORDER_NUMBER_WHOLE = {
    "type": "integer",
    "minimum": -(10**MAX_NUMBER_DIGITS - 1),
    "maximum": 10**MAX_NUMBER_DIGITS - 1,
}
extend_schema_field({"oneOf": [ORDER_NUMBER_TEXT, ORDER_NUMBER_WHOLE]})(OrderNumberField)


class OrderNumbersField(serializers.Field):
    """Several order numbers of one customer: a list of strings (or whole numbers), each once."""

    default_error_messages = {
        "invalid": 'order_numbers must be a list of order numbers, such as ["1042", "1044"]',
        "empty": "order_numbers is empty: name at least one order",
        "too_many": f"order_numbers names {{count}} orders; a ticket covers at most {ORDERS_MAX}",
        "item": 'order_numbers[{index}] must be a string such as "1042"',
        "blank": "order_numbers[{index}] is blank",
    }

    def to_internal_value(self, data: Any) -> list[str]:
        if not isinstance(data, list):
            self.fail("invalid")
        if not data:
            self.fail("empty")
        if len(data) > ORDERS_MAX:
            self.fail("too_many", count=len(data))
        numbers = []
        for index, item in enumerate(data):
            if isinstance(item, bool) or not isinstance(item, str | int):
                self.fail("item", index=index)
            if not str(item).strip():
                self.fail("blank", index=index)
            try:
                numbers.append(order_number_read(item))
            except ValueError as exc:
                raise serializers.ValidationError(f"order_numbers[{index}]: {exc}") from None
        return numbers

    def to_representation(self, value: list[str]) -> list[str]:
        return value


extend_schema_field(
    {
        "type": "array",
        "minItems": 1,
        "maxItems": ORDERS_MAX,
        "items": {"oneOf": [ORDER_NUMBER_TEXT, ORDER_NUMBER_WHOLE]},
    }
)(OrderNumbersField)


class StrictBody(serializers.Serializer):
    """A request body that is a JSON object with only the fields the serializer names: anything
    else is a 400 that says so, not a field silently dropped. `schema_rules` adds what the
    fields cannot say (one field of two) to its OpenAPI schema."""

    schema_rules: dict[str, Any] = {}

    def to_internal_value(self, data: Any) -> dict:
        if not isinstance(data, dict):
            raise serializers.ValidationError({NON_FIELD: ["The body must be a JSON object."]})
        unknown = sorted(set(data) - set(self.fields))
        if unknown:
            raise serializers.ValidationError(
                {NON_FIELD: [f"Unknown field(s): {', '.join(unknown)}."]}
            )
        return super().to_internal_value(data)


@extend_schema_field({"type": "string", "maxLength": NOTE_MAX, **NO_NUL})
class NoteField(serializers.CharField):
    """Text without a NUL (refunds.services.tickets refuses one: PostgreSQL cannot hold it)."""


class TicketOpen(StrictBody):
    """Open a refund ticket for an order (`order_number`) or for several of one customer's
    (`order_numbers`): one of the two."""

    schema_rules = {"oneOf": [{"required": ["order_number"]}, {"required": ["order_numbers"]}]}

    order_number = OrderNumberField(
        required=False, help_text="The order to refund the shipping fee of."
    )
    order_numbers = OrderNumbersField(
        required=False,
        help_text="Instead of order_number: several orders of one customer, one ticket for "
        f"them all (the first is its order_number; at most {ORDERS_MAX}).",
    )
    note = NoteField(
        required=False,
        allow_blank=True,
        trim_whitespace=False,
        max_length=NOTE_MAX,
        default="",
        help_text="What the customer said.",
        error_messages={
            "invalid": "note must be a string",
            "null": "note must be a string",
            "max_length": f"The note is too long (at most {NOTE_MAX} characters)",
        },
    )

    def validate_note(self, value: Any) -> str:
        if not isinstance(self.initial_data.get("note", ""), str):
            raise serializers.ValidationError("note must be a string")
        return value

    def validate(self, attrs: dict) -> dict:
        given = [name for name in ("order_number", "order_numbers") if name in attrs]
        if not given:
            raise serializers.ValidationError(
                {"order_number": ["Missing field: order_number (or order_numbers, a list)"]}
            )
        if len(given) == 2:
            raise serializers.ValidationError(
                {NON_FIELD: ["Give order_number or order_numbers, not both."]}
            )
        return attrs


class TicketRef(serializers.ModelSerializer):
    url = serializers.SerializerMethodField()

    class Meta:
        model = Ticket
        fields = ["id", "thread_id", "status", "url"]

    def get_url(self, ticket: Ticket) -> str:
        request = self.context.get("request")
        path = f"/api/tickets/{ticket.pk}/"
        return request.build_absolute_uri(path) if request else path


class ReviewOrderOut(serializers.Serializer):
    """One order of a ticket of several, as its review lists it."""

    number = serializers.CharField()
    amount_cents = serializers.IntegerField(
        help_text="What the review asks for it; 0 when there is nothing to decide."
    )
    fee_cents = serializers.IntegerField()
    late_by_days = serializers.IntegerField()
    status = serializers.ChoiceField(
        choices=["open", "declined", "refunded"],
        help_text="open: answer it; declined: by policy (declined_reason); refunded: already "
        "(receipt).",
    )
    declined_reason = serializers.CharField()
    receipt = serializers.CharField()
    notes = serializers.ListField(child=serializers.CharField())
    flags = serializers.ListField(child=serializers.CharField())


class PendingReview(serializers.Serializer):
    interrupt_id = serializers.CharField()
    payload = serializers.JSONField(help_text="LangChain Agent Inbox shape: action_request, ...")
    orders = ReviewOrderOut(
        many=True,
        allow_null=True,
        help_text="A ticket of several orders: one line per order (payload.orders); answer the "
        "open ones in the decision's `orders`. null for a ticket of one order.",
    )


class DecisionOut(serializers.ModelSerializer):
    reviewer = serializers.CharField(
        source="reviewer.username",
        allow_null=True,
        help_text="Who answered, when a reviewer did; null for the customer's reply and the "
        "wait's timer (see `answered_by`).",
    )
    answered_by = serializers.SerializerMethodField()
    applied = serializers.SerializerMethodField()

    class Meta:
        model = Decision
        fields = [
            "interrupt_id",
            "answer",
            "reason",
            "orders",
            "reviewer",
            "answered_by",
            "decided_at",
            "applied",
        ]

    def get_answered_by(self, decision: Decision) -> Literal["reviewer", "customer", "timer"]:
        """reviewer (approve, reject, ask), customer (their reply) or timer (no reply came)."""
        if decision.answer == Decision.Answer.REPLY:
            return "customer"
        return "timer" if decision.answer == Decision.Answer.NO_REPLY else "reviewer"

    def get_applied(self, decision: Decision) -> bool:
        return decision.applied_at is not None


class ChargeOut(serializers.ModelSerializer):
    class Meta:
        model = Charge
        fields = ["receipt", "amount_cents", "status", "processor_status", "created_at"]


class EmailOut(serializers.ModelSerializer):
    class Meta:
        model = Email
        fields = ["to", "subject", "status", "sent_at"]


class TicketOut(serializers.ModelSerializer):
    order_number = serializers.CharField(source="order.number", help_text="Its first order.")
    order_numbers = serializers.SerializerMethodField(
        help_text="Every order the ticket covers, its first order first."
    )
    # Lazy: the words follow the agent limit in force when the schema is drawn.
    required_role = serializers.SerializerMethodField(help_text=lazy(policy.role_help, str)())
    nodes_run = serializers.ListField(child=serializers.CharField())
    pending_review = serializers.SerializerMethodField()
    decision = serializers.SerializerMethodField()
    charges = ChargeOut(many=True)
    emails = EmailOut(many=True)
    refund_state = serializers.SerializerMethodField(
        help_text="Where a refunded ticket's money is, by what the processor said last: "
        '"on_its_way" (started, not at the customer\'s bank yet), "refunded" (the processor '
        'said it succeeded, or a gateway that reports nothing), "failed"; null unless the '
        "ticket is refunded."
    )
    refund_words = serializers.SerializerMethodField(
        help_text="The same in the desk's words: \"Refund of $6.99 started, on its way to the "
        'customer\'s bank", "Refunded", or the failure and what it means for the money.'
    )

    class Meta:
        model = Ticket
        fields = [
            "id",
            "thread_id",
            "order_number",
            "order_numbers",
            "note",
            "status",
            "required_role",
            "amount_cents",
            "nodes_run",
            "outcome_reason",
            "last_error",
            "pending_review",
            "decision",
            "refund_state",
            "refund_words",
            "charges",
            "emails",
            "created_at",
            "updated_at",
        ]

    @extend_schema_field(serializers.ChoiceField(choices=REFUND_STATES, allow_null=True))
    def get_refund_state(self, ticket: Ticket) -> str | None:
        progress = refund_progress(ticket)
        return progress["state"] if progress else None

    @extend_schema_field(serializers.CharField(allow_null=True))
    def get_refund_words(self, ticket: Ticket) -> str | None:
        progress = refund_progress(ticket)
        return progress["words"] if progress else None

    @extend_schema_field(serializers.ChoiceField(choices=["agent", "manager"], allow_null=True))
    def get_required_role(self, ticket: Ticket) -> str | None:
        return ticket.required_role or None

    @extend_schema_field(serializers.ListField(child=serializers.CharField()))
    def get_order_numbers(self, ticket: Ticket) -> list[str]:
        return ticket.order_numbers()

    @extend_schema_field(PendingReview(allow_null=True))
    def get_pending_review(self, ticket: Ticket) -> dict | None:
        if ticket.status != Ticket.Status.AWAITING_REVIEW:
            return None
        payload = ticket.pending_payload or {}
        return {
            "interrupt_id": ticket.pending_interrupt_id,
            "payload": ticket.pending_payload,
            "orders": payload.get("orders") if isinstance(payload, dict) else None,
        }

    @extend_schema_field(DecisionOut(allow_null=True))
    def get_decision(self, ticket: Ticket) -> dict | None:
        decisions = sorted(ticket.decisions.all(), key=lambda d: d.decided_at)
        return DecisionOut(decisions[-1]).data if decisions else None


class TicketPage(serializers.Serializer):
    """One page of the ticket list, as DRF's PageNumberPagination answers it."""

    count = serializers.IntegerField(help_text="Tickets matching, on every page.")
    next = serializers.URLField(allow_null=True, help_text="The next page, or null on the last.")
    previous = serializers.URLField(
        allow_null=True, help_text="The previous page, or null on the first."
    )
    results = TicketOut(many=True)


class Error(serializers.Serializer):
    """The one error shape, for every status."""

    status = serializers.IntegerField()
    code = serializers.CharField()
    error = serializers.CharField(help_text="What went wrong, in words for a person.")
    ticket = TicketRef(required=False, help_text="On 409: the order's open ticket.")
    order_number = serializers.CharField(
        required=False, help_text="On 409: the order asked for that the open ticket covers."
    )


# "fields" cannot be a class attribute of a serializer (it is the serializer's own field map).
Error._declared_fields["fields"] = serializers.DictField(
    required=False, help_text="On 400: the messages of each bad field."
)


class WholeNumber(serializers.IntegerField):
    """A JSON integer: not a string, a fraction or a boolean."""

    default_error_messages = {"invalid": "must be a whole number, a JSON integer such as 2"}

    def to_internal_value(self, data: Any) -> int:
        if isinstance(data, bool) or not isinstance(data, int):
            self.fail("invalid")
        return super().to_internal_value(data)


class WholeCents(WholeNumber):
    """Whole cents as a JSON integer: not a string, a fraction or a boolean."""

    default_error_messages = {"invalid": "must be whole cents, a JSON integer such as 1250"}


class Text(serializers.CharField):
    """Text as a JSON string only (DRF's CharField turns a number into text)."""

    default_error_messages = {"invalid": "must be a string"}

    def to_internal_value(self, data: Any) -> str:
        if not isinstance(data, str):
            self.fail("invalid")
        return super().to_internal_value(data)


class PartIn(StrictBody):
    """One part of an order's refund: a line's units, the shipping fee, or the whole order."""

    def to_internal_value(self, data: Any) -> dict:
        if not isinstance(data, dict):
            raise serializers.ValidationError(
                {NON_FIELD: ['must be an object such as {"line": 11, "quantity": 1}']}
            )
        return super().to_internal_value(data)

    line = WholeNumber(
        required=False, help_text="The line's id (pending_review.orders[].order.lines[].id)."
    )
    quantity = WholeNumber(
        required=False,
        min_value=1,
        help_text="With `line`: how many of it, at most what is left of it.",
    )
    shipping = serializers.BooleanField(required=False, help_text="true: the shipping fee.")
    whole_order = serializers.BooleanField(
        required=False,
        help_text="true, alone: every line's units left and the shipping fee left.",
    )
    amount_cents = WholeCents(
        required=False,
        min_value=1,
        help_text="Pay less than the part's price (a partial refund); left out: its full price.",
    )
    restock = serializers.BooleanField(
        required=False, help_text="With `line`: true when the item comes back to the shop."
    )


class OrderAnswerIn(StrictBody):
    """The answer for one order of the ticket."""

    def to_internal_value(self, data: Any) -> dict:
        if not isinstance(data, dict):
            raise serializers.ValidationError(
                {NON_FIELD: ['must be an object such as {"answer": "approve"}']}
            )
        return super().to_internal_value(data)

    answer = serializers.ChoiceField(choices=["approve", "reject"])
    amount_cents = WholeCents(
        required=False,
        min_value=1,
        help_text="approve, a shorthand kept for earlier clients: pay this much of the proposal "
        "(managers; its parts scaled down to it, at most what it proposes). Expanded into "
        "`parts` before the decision is checked.",
    )
    reason = Text(
        required=False,
        allow_blank=True,
        max_length=REASON_MAX,
        help_text="reject: why, for the customer (else the decision's `reason`); approve: why "
        "less than proposed, if it is.",
    )
    parts = serializers.ListField(
        child=PartIn(),
        required=False,
        allow_empty=False,
        min_length=1,  # the schema's minItems (allow_empty's words are the ones said)
        help_text="approve: what to refund of the order instead of the proposal "
        '(pending_review.orders[].parts), e.g. [{"line": 11, "quantity": 1}, {"shipping": '
        'true}] or [{"whole_order": true}]; their sum is the amount. A line of another order, '
        "more units than are left, an amount above a part's price or a part given twice is "
        "refused with 422 and changes nothing.",
    )


class DecisionIn(serializers.Serializer):
    """Answer a ticket's pending review, as a reviewer does on the desk. A decision has one
    shape, its answer per open order with the parts each approval refunds (`orders`); `answer`
    alone ("approve" as proposed, "reject" with `reason`) and `amount_cents` are shorthands
    expanded into it before it is checked, as the desk's buttons are; "ask" asks the customer
    the question in `reason` instead."""

    interrupt_id = serializers.CharField(
        max_length=64, help_text="The pending review's interrupt id (review.interrupt_id)."
    )
    answer = serializers.ChoiceField(
        choices=["approve", "reject", "ask"],
        help_text="approve (as proposed, for every open order not in `orders`), reject (with a "
        "reason), or ask (the customer the question in `reason`).",
    )
    reason = serializers.CharField(
        required=False,
        allow_blank=True,
        default="",
        max_length=REASON_MAX,
        help_text="For the customer: why, for every rejected order without its own reason (a "
        "ticket of one order: why less, for a lower approval); the question, to ask.",
    )
    note = serializers.CharField(
        required=False,
        allow_blank=True,
        default="",
        max_length=NOTE_MAX,
        help_text="Internal; never emailed.",
    )
    amount_cents = WholeCents(
        required=False,
        allow_null=True,
        default=None,
        min_value=1,
        help_text="A shorthand kept for earlier clients (managers, one open order): approve "
        "this much of the proposal, its parts scaled down to it. Expanded into `orders` "
        "before the decision is checked.",
    )
    orders = serializers.DictField(
        child=OrderAnswerIn(),
        required=False,
        allow_null=True,
        allow_empty=False,
        validators=[MinLengthValidator(1)],  # the schema's minProperties, as min_length above
        default=None,
        help_text="The answer per open order number (pending_review.orders), e.g. "
        '{"1042": {"answer": "approve"}, "1049": {"answer": "reject", "reason": "..."}}: a '
        "ticket of several orders, or one order approved with its own `parts`. An order left "
        "out gets `answer`; a rejection without its own reason gets `reason`.",
    )


class DecisionMade(serializers.ModelSerializer):
    """The decision recorded, in its one shape (`orders`: each open order's answer, an approval
    with the parts it refunds and their `amount_cents`): a worker applies it."""

    reviewer = serializers.CharField(source="reviewer.username")

    class Meta:
        model = Decision
        fields = [
            "id",
            "interrupt_id",
            "answer",
            "reason",
            "orders",
            "reviewer",
            "decided_at",
        ]


@extend_schema_field(
    {
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
)
class AnyOrderLine(serializers.JSONField):
    """An order as sent: refunds.order_in.OrderIn reads it and the upsert answers it order by
    order (a bad one is refused on its own, not the whole request), so its schema names no rule."""


class OrdersPush(StrictBody):
    """Create or update up to 1,000 orders by order number."""

    orders = serializers.ListField(
        child=AnyOrderLine(allow_null=True),
        min_length=1,
        max_length=ORDERS_PUSH_MAX,
        error_messages={
            "max_length": f"At most {ORDERS_PUSH_MAX} orders per request; send the rest in "
            "another request.",
            "min_length": "orders is empty: send at least one order.",
            "not_a_list": "orders must be a list of orders.",
            "required": "Missing field: orders",
            "null": "orders must be a list of orders.",
        },
    )


class OrderResult(serializers.Serializer):
    line = serializers.IntegerField(help_text="The order's place in the request's list, from 1.")
    order_number = serializers.CharField(allow_blank=True)
    result = serializers.ChoiceField(choices=["created", "updated", "unchanged", "refused"])
    reason = serializers.CharField(allow_blank=True, help_text="Why it was refused.")
    field = serializers.CharField(
        allow_blank=True,
        help_text="The value refused within the order: its path, such as `shipping_fee` or "
        "`lines[1].quantity` (lines counted from 0); empty when the order is refused as a "
        "whole (its number twice, money refunded, an open ticket) or not refused.",
    )


class OrdersPushed(serializers.Serializer):
    created = serializers.IntegerField()
    updated = serializers.IntegerField()
    unchanged = serializers.IntegerField()
    refused = serializers.IntegerField()
    results = OrderResult(many=True)


@extend_schema_field({"type": "string", "format": "email", "maxLength": 254})
class SenderField(serializers.CharField):
    """An email address; intake.services.message_problems says when it is not one."""


class MessageText(serializers.CharField):
    """Some text, at most INTAKE_MAX_CHARS characters: intake.services.message_problems checks."""


class MessageTextScheme(OpenApiSerializerFieldExtension):
    target_class = MessageText

    def map_serializer_field(self, auto_schema, direction):
        # Read when the schema is drawn, as message_problems reads it when a message comes.
        text = {"type": "string", "pattern": r"\S", **NO_NUL}
        return {**text, "maxLength": settings.INTAKE_MAX_CHARS}


RECEIVED_SINCE = datetime(2000, 1, 1, tzinfo=UTC)


@extend_schema_field({"type": "string", "format": "date-time", "pattern": "^2[0-9]{3}-"})
class ReceivedAt(serializers.DateTimeField):
    """A time from the year 2000 on (MessageIn.validate_received_at says the rest)."""


class MessageIn(StrictBody):
    """A customer's message, as a helpdesk received it; the intake reads it and opens the
    ticket (or sends it to "Needs sorting")."""

    sender = SenderField(
        max_length=254,
        trim_whitespace=True,
        help_text="The customer's email address: the acknowledgment goes there, and an order "
        "the message names must be theirs.",
        error_messages={"required": "Missing field: sender", "blank": "sender is empty"},
    )
    sender_name = serializers.CharField(
        required=False, allow_blank=True, max_length=200, default="", help_text="Their name."
    )
    subject = serializers.CharField(
        required=False, allow_blank=True, max_length=998, default="", trim_whitespace=False
    )
    body = MessageText(
        trim_whitespace=False,
        help_text="What the customer wrote, as plain text.",
        error_messages={"required": "Missing field: body", "blank": "The message has no text."},
    )
    received_at = ReceivedAt(
        required=False,
        help_text="When the customer sent it, from 2000 to a day from now; now when left out.",
    )
    to = serializers.ListField(
        child=serializers.CharField(max_length=254),
        required=False,
        default=list,
        max_length=20,
        help_text="The addresses it was sent to: a reply to a reviewer's question, sent to the "
        "question's reply address, resumes that ticket instead of opening one.",
    )
    in_reply_to = serializers.ListField(
        child=serializers.CharField(max_length=998),
        required=False,
        default=list,
        max_length=50,
        help_text="The Message-IDs it answers (its In-Reply-To and References): a reply to a "
        "question's email resumes that ticket.",
    )

    def validate_received_at(self, value: datetime) -> datetime:
        # Year 1 or next month is a client's default or a wrong zone, not when anyone wrote: no
        # order a helpdesk brings is older than 2000, and a day ahead covers every zone's offset.
        # 422, not 400: a schema's date-time cannot say "until tomorrow".
        if not RECEIVED_SINCE <= value <= timezone.now() + timedelta(days=1):
            raise Unprocessable(
                f"received_at {value.isoformat()} is not when a customer wrote: it must be from "
                "2000-01-01 to a day from now."
            )
        return value


class MessageOut(serializers.Serializer):
    id = serializers.IntegerField()
    status = serializers.ChoiceField(
        choices=[
            ("received", "Received"),
            ("opened", "Opened a ticket"),
            ("added", "Added to an open ticket"),
            ("needs_sorting", "Needs sorting"),
            ("not_refund", "Not a refund request"),
        ],
        help_text="received until the intake has read and placed it.",
    )
    received_at = serializers.DateTimeField()
    ticket = serializers.IntegerField(
        source="ticket_id", allow_null=True, help_text="The ticket it opened or was added to."
    )


class StrictBodyScheme(OpenApiSerializerExtension):
    """A StrictBody's schema says what its validation does: no other field, and its rules."""

    target_class = StrictBody
    match_subclasses = True

    def map_serializer(self, auto_schema, direction):
        schema = auto_schema._map_basic_serializer(self.target, direction)
        return {**schema, "additionalProperties": False, **self.target.schema_rules}


class CharFieldScheme(OpenApiSerializerFieldExtension):
    """A request's CharField says what DRF refuses with a 400: a NUL, and only spaces (trimmed
    to a blank) where a blank is refused; a field's own pattern or format stands."""

    target_class = serializers.CharField
    match_subclasses = True
    priority = -1  # after a field's own extension (MessageTextScheme)

    def map_serializer_field(self, auto_schema, direction):
        schema = auto_schema._map_serializer_field(self.target, direction, bypass_extensions=True)
        if direction != "request" or {"pattern", "format"} & set(schema):
            return schema
        if self.target.trim_whitespace and not self.target.allow_blank:
            schema["pattern"] = r"\S"
        return {**schema, **NO_NUL}
