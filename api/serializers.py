"""The order push's body and answer (POST /api/orders/), as DRF serializers."""

from __future__ import annotations

from typing import Any

from drf_spectacular.extensions import OpenApiSerializerExtension
from drf_spectacular.utils import extend_schema_field
from rest_framework import serializers

from api.errors import NON_FIELD

ORDERS_PUSH_MAX = 1000


class StrictBody(serializers.Serializer):
    """A request body that is a JSON object with only the fields the serializer names: anything
    else is a 400 that says so, not a field silently dropped."""

    def to_internal_value(self, data: Any) -> dict:
        if not isinstance(data, dict):
            raise serializers.ValidationError({NON_FIELD: ["The body must be a JSON object."]})
        unknown = sorted(set(data) - set(self.fields))
        if unknown:
            raise serializers.ValidationError(
                {NON_FIELD: [f"Unknown field(s): {', '.join(unknown)}."]}
            )
        return super().to_internal_value(data)


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


class StrictBodyScheme(OpenApiSerializerExtension):
    """A StrictBody's schema says what its validation does: no other field."""

    target_class = StrictBody
    match_subclasses = True

    def map_serializer(self, auto_schema, direction):
        schema = auto_schema._map_basic_serializer(self.target, direction)
        return {**schema, "additionalProperties": False}
