"""Orders in the admin: typed as every way in reads them, unchanged while a ticket is open."""

from django import forms
from django.contrib import admin
from django.core.exceptions import PermissionDenied

from core.admin import ReadOnly
from refunds import currencies, selectors
from refunds.admin.common import money
from refunds.flow.words import dollars
from refunds.models import Order, OrderLine, OutsideRefund, PaymentDispute, Ticket
from refunds.order_in import LineRefused, OrderIn


class OrderForm(forms.ModelForm):
    """An order as every way in reads it (OrderIn), the fee in the major unit, never cents."""

    shipping_fee = forms.CharField(
        max_length=30,
        help_text="In the order's currency: 8.99 or $8.99 for USD, 899 for JPY.",
    )

    class Meta:
        model = Order
        fields = [
            "number",
            "customer_name",
            "customer_email",
            "currency",
            "shipping_fee",
            "promised_on",
            "delivered_on",
            "payment_reference",
        ]

    def __init__(self, *args, **kwargs) -> None:
        super().__init__(*args, **kwargs)
        if self.instance.pk:
            order = self.instance
            self.initial["shipping_fee"] = currencies.from_minor(
                order.shipping_fee_cents, order.currency
            )

    def clean(self) -> dict:
        cleaned = super().clean() or {}
        if self.errors:  # a field's own error says it first
            return cleaned
        try:
            said = {"order_number" if k == "number" else k: v for k, v in cleaned.items()}
            sent = OrderIn.read(said, typed=True)
        except LineRefused as exc:
            self.add_error({"order_number": "number"}.get(exc.field, exc.field) or None, str(exc))
            return cleaned
        cleaned.update(sent.model_dump(include=set(self.Meta.fields)))
        order, fee, currency = self.instance, sent.shipping_fee_cents, sent.currency
        if order.pk and self.changed_data:
            refusal = open_ticket_refusal(order)
            if refusal:
                raise forms.ValidationError(refusal)
        if order.pk and (fee, currency) != (order.shipping_fee_cents, order.currency):
            # As for imports: what a customer was refunded was worked out from this fee.
            held = order.refunded_cents()
            if held:
                raise forms.ValidationError(
                    f"{currencies.from_minor(held, order.currency)} {order.currency} was refunded "
                    "or is under way for this order: its fee and currency stay as they are."
                )
        order.shipping_fee_cents = fee
        return cleaned


def open_ticket_refusal(order: Order) -> str:
    """Why an order may not change now: its open ticket pays against the order as it stands."""
    ticket = Ticket.objects.filter(links__order=order, status__in=Ticket.OPEN).first()
    if ticket is None:
        return ""
    return (
        f"Order {order.number} has an open ticket ({ticket.pk}, "
        f"{ticket.get_status_display().lower()}): it stays as it is until that ticket is "
        "finished."
    )


class OrderLineInline(ReadOnly, admin.TabularInline):
    """Each line as the shop sent it, with what was refunded of it and what is left."""

    model = OrderLine
    fields = readonly_fields = (
        "line_id",
        "sku",
        "title",
        "unit_price",
        "quantity",
        "tax",
        "refunded",
        "left",
    )

    unit_price = money("unit_price_cents", "Unit price", "order.currency")
    tax = money("tax_cents", "Tax", "order.currency")

    def _bought(self, line: OrderLine) -> selectors.LineBought:
        return selectors.LineBought(
            line, *selectors.refunded_by_line([line.pk]).get(line.pk, (0, 0))
        )

    @admin.display(description="Refunded")
    def refunded(self, line: OrderLine) -> str:
        bought = self._bought(line)
        return f"{bought.refunded_quantity} · {dollars(bought.refunded_cents, line.order.currency)}"

    @admin.display(description="Left")
    def left(self, line: OrderLine) -> str:
        bought = self._bought(line)
        left = dollars(bought.left_cents, line.order.currency)
        return f"{bought.left_quantity} · {left}"


class OutsideRefundInline(ReadOnly, admin.TabularInline):
    """Refunds made outside the desk count against the order's balance unless they failed."""

    model = OutsideRefund
    fields = readonly_fields = (
        "processor_id",
        "refunded",
        "status",
        "failure_reason",
        "made_at",
        "recorded_at",
    )
    verbose_name = "refund made outside the desk"
    verbose_name_plural = "refunds made outside the desk"

    refunded = money("amount_cents", "Amount", "order.currency")


class PaymentDisputeInline(ReadOnly, admin.TabularInline):
    """While a dispute is open the desk charges nothing without a manager's approval."""

    model = PaymentDispute
    fields = readonly_fields = ("processor_id", "said", "status", "reason", "opened_at")
    verbose_name = "dispute of the payment"
    verbose_name_plural = "disputes of the payment"

    @admin.display(description="What it means")
    def said(self, dispute: PaymentDispute) -> str:
        return dispute.said()


@admin.register(Order)
class OrderAdmin(admin.ModelAdmin):
    form = OrderForm
    inlines = [OrderLineInline, OutsideRefundInline, PaymentDisputeInline]
    readonly_fields = ["total", "paid"]

    def save_model(self, request, obj, form, change) -> None:
        if change:
            # Again, the row locked: a ticket opened since the form was checked keeps its order.
            Order.objects.select_for_update().filter(pk=obj.pk).first()
            refusal = open_ticket_refusal(obj)
            if refusal:
                raise PermissionDenied(refusal)
        super().save_model(request, obj, form, change)

    list_display = ["number", "customer_name", "promised_on", "delivered_on", "fee", "currency"]
    search_fields = ["number", "customer_name", "customer_email", "payment_reference"]
    fee = money("shipping_fee_cents", "Shipping fee", "currency")
    total = money(
        "total_cents",
        "Total",
        "currency",
        "— (sent without its lines: only the shipping fee is refundable)",
    )
    paid = money("paid_cents", "Paid", "currency", "—")
