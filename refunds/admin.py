from django import forms
from django.contrib import admin, messages
from django.core.exceptions import PermissionDenied
from django.shortcuts import get_object_or_404, redirect, render
from django.urls import path, reverse
from django.utils.html import format_html, format_html_join

from core.admin import ReadOnly
from refunds import currencies, outbox, permissions, persistence, selectors, services
from refunds.flow.words import dollars
from refunds.models import (
    CannedReason,
    CannedReasonText,
    Charge,
    Decision,
    Email,
    Fork,
    Order,
    OrderLine,
    OutsideRefund,
    PaymentDispute,
    ReconcileRun,
    StripeEvent,
    Ticket,
    TicketOrder,
)
from refunds.money import money_moved
from refunds.order_in import LineRefused, OrderIn
from refunds.payments.demo import DemoProcessorDispute


def _money(field: str, label: str):
    """A cents field shown in dollars, sortable by the field."""

    @admin.display(description=label, ordering=field)
    def show(self, obj) -> str:
        return dollars(getattr(obj, field))

    show.__name__ = f"{field}_dollars"
    return show


class Dollars:
    """Amounts in dollars everywhere in the admin, as on the desk ($6.99, never 699)."""

    amount = _money("amount_cents", "Amount")
    previous_amount = _money("previous_amount_cents", "Previous amount")


class OrderForm(forms.ModelForm):
    """An order as every way in reads it (refunds.order_in.OrderIn), the fee typed in the
    currency's major unit ("8.99", "$1,020.50"), never in cents: full-width digits, a third
    decimal, words or a negative are refused with the reason."""

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
    """Why an order may not change now: its open ticket's review shows what lookup read, and
    its charge pays against the order as it stands (as for imports and pushes)."""
    ticket = Ticket.objects.filter(links__order=order, status__in=Ticket.OPEN).first()
    if ticket is None:
        return ""
    return (
        f"Order {order.number} has an open ticket ({ticket.pk}, "
        f"{ticket.get_status_display().lower()}): it stays as it is until that ticket is "
        "finished."
    )


class OrderLineInline(ReadOnly, admin.TabularInline):
    """What the order holds, as the shop sent it (imports, pushes, the order source write it):
    each line with what was refunded of it and what is left."""

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

    @admin.display(description="Unit price")
    def unit_price(self, line: OrderLine) -> str:
        return dollars(line.unit_price_cents, line.order.currency)

    @admin.display(description="Tax")
    def tax(self, line: OrderLine) -> str:
        return dollars(line.tax_cents, line.order.currency)

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
    """Refunds of the order's payment made outside the desk (Stripe's dashboard, the shop's
    admin), as the ledger's pre-charge lookup and `reconcile` recorded them: they count against
    the order's balance unless the processor failed or canceled them."""

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

    @admin.display(description="Amount")
    def refunded(self, refund: OutsideRefund) -> str:
        return dollars(refund.amount_cents, refund.order.currency)


class PaymentDisputeInline(ReadOnly, admin.TabularInline):
    """Disputes of the order's payment as the processor said last (the pre-charge lookup and
    Stripe's dispute events record them): while one is open the desk charges nothing without
    a manager's approval."""

    model = PaymentDispute
    fields = readonly_fields = ("processor_id", "said", "status", "reason", "opened_at")
    verbose_name = "dispute of the payment"
    verbose_name_plural = "disputes of the payment"

    @admin.display(description="What it means")
    def said(self, dispute: PaymentDispute) -> str:
        return dispute.said()


@admin.register(DemoProcessorDispute)
class DemoProcessorDisputeAdmin(admin.ModelAdmin):
    """The demo's processor: add one to mark a payment disputed (status needs_response), as a
    customer's bank does at Stripe; set it to won or lost to close it."""

    list_display = ("payment_reference", "status", "created_at")


@admin.register(Order)
class OrderAdmin(admin.ModelAdmin):
    form = OrderForm
    inlines = [OrderLineInline, OutsideRefundInline, PaymentDisputeInline]
    readonly_fields = ["total", "paid"]

    def save_model(self, request, obj, form, change) -> None:
        if change:
            # Again at the write, the row locked (the admin's view is one transaction): a
            # ticket opened since the form was checked keeps the order it read.
            Order.objects.select_for_update().filter(pk=obj.pk).first()
            refusal = open_ticket_refusal(obj)
            if refusal:
                raise PermissionDenied(refusal)
        super().save_model(request, obj, form, change)

    list_display = ["number", "customer_name", "promised_on", "delivered_on", "fee", "currency"]
    search_fields = ["number", "customer_name", "customer_email", "payment_reference"]

    @admin.display(description="Total")
    def total(self, order: Order) -> str:
        if order.total_cents is None:
            return "— (sent without its lines: only the shipping fee is refundable)"
        return dollars(order.total_cents, order.currency)

    @admin.display(description="Paid")
    def paid(self, order: Order) -> str:
        if order.paid_cents is None:
            return "—"
        return dollars(order.paid_cents, order.currency)

    @admin.display(description="Shipping fee", ordering="shipping_fee_cents")
    def fee(self, order: Order) -> str:
        return dollars(order.shipping_fee_cents, order.currency)


class TicketOrderInline(ReadOnly, admin.TabularInline):
    model = TicketOrder
    fields = readonly_fields = ("position", "order", "open")
    verbose_name = "order covered"
    verbose_name_plural = "orders covered (the first is the ticket's order)"


class DecisionInline(Dollars, ReadOnly, admin.TabularInline):
    model = Decision
    fields = readonly_fields = (
        "interrupt_id",
        "reviewer",
        "answer",
        "amount",
        "orders",
        "reason",
        "note",
        "decided_at",
        "applied_at",
    )


class ForkInline(Dollars, ReadOnly, admin.TabularInline):
    model = Fork
    fields = readonly_fields = (
        "created_at",
        "by",
        "previous_amount",
        "amount",
        "reason",
        "from_checkpoint_id",
        "applied_at",
        "refused_reason",
    )
    verbose_name = "fork (audit)"


class ChargeInline(Dollars, ReadOnly, admin.TabularInline):
    model = Charge
    fields = readonly_fields = (
        "idempotency_key",
        "amount",
        "status",
        "receipt",
        "error",
        "epoch",
        "created_at",
        "settled_at",
    )


class EmailInline(ReadOnly, admin.TabularInline):
    model = Email
    fields = readonly_fields = (
        "key",
        "to",
        "subject",
        "status",
        "attempts",
        "last_error",
        "sent_at",
    )


@admin.register(Ticket)
class TicketAdmin(Dollars, ReadOnly, admin.ModelAdmin):
    list_display = [
        "id",
        "thread_id",
        "order",
        "status",
        "required_role",
        "amount",
        "attempts",
        "updated_at",
    ]
    list_filter = ["status", "required_role"]
    search_fields = ["thread_id", "links__order__number"]
    list_select_related = ["order"]
    readonly_fields = [
        "thread_id",
        "status",
        "next_nodes",
        "nodes_run",
        "pending_interrupt_id",
        "pending_payload",
        "required_role",
        "amount",
        "claimed_by",
        "claim_expires_at",
        "escalated_for",
        "escalation_note",
        "review_since",
        "lease_owner",
        "lease_expires_at",
        "lease_epoch",
        "attempts",
        "last_error",
        "created_at",
        "updated_at",
        "fork_link",
        "checkpoint_history",
    ]
    inlines = [TicketOrderInline, DecisionInline, ForkInline, ChargeInline, EmailInline]
    actions = ["retry_failed"]

    @admin.display(description="Checkpoint history (newest first)")
    def checkpoint_history(self, ticket: Ticket) -> str:
        rows = (
            (
                snap.metadata.get("step") if snap.metadata else "",
                ", ".join(snap.next) or "(end)",
                ", ".join(snap.values.get("trail", [])),
                snap.config["configurable"].get("checkpoint_id", ""),
            )
            for snap in persistence.history(ticket.thread_id)
        )
        body = format_html_join(
            "", "<tr><td>{}</td><td>{}</td><td>{}</td><td><code>{}</code></td></tr>", rows
        )
        return format_html(
            '<p><a href="{}">The readable history, with branches and forks</a></p>'
            "<table><tr><th>step</th><th>next</th><th>nodes run</th><th>checkpoint</th></tr>"
            "{}</table>",
            reverse("ops:history", args=[ticket.pk]),
            body,
        )

    @admin.display(description="Correct the amount")
    def fork_link(self, ticket: Ticket) -> str:
        if ticket.status not in services.FORKABLE or money_moved(ticket):
            return (
                "Only a ticket awaiting review, rejected or failed, with no charge, can be forked."
            )
        url = reverse("admin:refunds_ticket_fork", args=[ticket.pk])
        return format_html('<a class="button" href="{}">Fork with a corrected amount</a>', url)

    def get_urls(self):
        fork = self.admin_site.admin_view(self.fork_view)
        return [
            path("<int:ticket_id>/fork/", fork, name="refunds_ticket_fork"),
            *super().get_urls(),
        ]

    def fork_view(self, request, ticket_id: int):
        """Fork the thread from its checkpoint before triage with a corrected amount."""
        if not self.has_retry_permission(request):
            raise PermissionDenied("Only admins fork a thread.")
        ticket = get_object_or_404(Ticket.objects.select_related("order"), pk=ticket_id)
        values = {"amount": "", "reason": ""}
        error = ""
        if request.method == "POST":
            values = {k: request.POST.get(k, "").strip() for k in values}
            try:
                cents = _cents(values["amount"])
                services.ticket_fork(
                    ticket=ticket, amount_cents=cents, reason=values["reason"], by=request.user
                )
            except (services.RefundError, PermissionDenied) as exc:
                error = str(exc)
            else:
                self.message_user(
                    request,
                    f"Forked ticket {ticket.pk} with amount "
                    f"{dollars(cents)}; it is being triaged again.",
                    messages.SUCCESS,
                )
                return redirect("admin:refunds_ticket_change", ticket.pk)
        context = {
            **self.admin_site.each_context(request),
            "title": f"Fork ticket {ticket.pk} with a corrected amount",
            "ticket": ticket,
            "values": values,
            "error": error,
            "opts": self.model._meta,
        }
        return render(
            request, "admin/refunds/ticket/fork.html", context, status=400 if error else 200
        )

    def has_retry_permission(self, request) -> bool:
        return permissions.is_admin(request.user)

    @admin.action(description="Retry the selected failed tickets", permissions=["retry"])
    def retry_failed(self, request, queryset) -> None:
        retried = sum(services.ticket_retry(ticket=t, by=request.user) for t in queryset)
        skipped = queryset.count() - retried
        self.message_user(request, f"Put {retried} ticket(s) back in line.", messages.SUCCESS)
        if skipped:
            self.message_user(
                request, f"{skipped} ticket(s) were not failed; left alone.", messages.WARNING
            )


@admin.register(Decision)
class DecisionAdmin(Dollars, ReadOnly, admin.ModelAdmin):
    list_display = ["ticket", "answer", "amount", "reviewer", "decided_at", "applied_at"]
    list_filter = ["answer"]
    readonly_fields = [
        "ticket",
        "interrupt_id",
        "reviewer",
        "answer",
        "amount",
        "reason",
        "note",
        "decided_at",
        "applied_at",
        "refused_reason",
    ]


@admin.register(Charge)
class ChargeAdmin(Dollars, ReadOnly, admin.ModelAdmin):
    list_display = [
        "idempotency_key",
        "ticket",
        "order",
        "amount",
        "status",
        "receipt",
        "processor_status",
    ]
    list_filter = ["status", "processor_status"]
    search_fields = ["receipt", "idempotency_key"]


@admin.register(StripeEvent)
class StripeEventAdmin(ReadOnly, admin.ModelAdmin):
    """Stripe's events as they came, and what handling each recorded (never edited by hand)."""

    list_display = ["event_id", "type", "created", "received_at", "handled_at", "outcome"]
    list_filter = ["type", ("handled_at", admin.EmptyFieldListFilter)]
    search_fields = ["event_id"]


@admin.register(ReconcileRun)
class ReconcileRunAdmin(ReadOnly, admin.ModelAdmin):
    """Each run of `reconcile` and its report, as the run saved it (/ops/reconcile/ shows the
    last one)."""

    list_display = ["started_at", "by", "since", "orders", "problem_count", "dispute_count"]
    list_filter = ["by"]
    readonly_fields = ["by", "started_at", "finished_at", "since", "orders", "report"]

    @admin.display(description="Problems")
    def problem_count(self, run: ReconcileRun) -> int:
        return len(run.problems)

    @admin.display(description="Open disputes")
    def dispute_count(self, run: ReconcileRun) -> int:
        return len(run.open_disputes)

    @admin.display(description="Report")
    def report(self, run: ReconcileRun) -> str:
        return format_html("<pre>{}</pre>", "\n".join(run.lines))


@admin.register(Email)
class EmailAdmin(ReadOnly, admin.ModelAdmin):
    # Five columns fit a 1280 px screen; the key, the attempts, the last error and an unknown
    # outcome are on each email's own page (and the Undelivered page lists what needs a person).
    list_display = ["subject", "to", "regarding", "status", "sent_at"]
    list_filter = ["status"]
    search_fields = ["key", "to"]
    actions = ["resend"]

    @admin.display(description="About")
    def regarding(self, email: Email) -> str:
        """Its ticket, or the message another run (the intake) sends it for."""
        other = outbox.about([email]).get(email.pk)
        if other is not None:
            return format_html('<a href="{}">{}</a>', other[1], other[0])
        if email.ticket_id is None:
            return "—"
        url = reverse("admin:refunds_ticket_change", args=[email.ticket_id])
        return format_html('<a href="{}">Ticket {}</a>', url, email.ticket_id)

    def has_resend_permission(self, request) -> bool:
        return permissions.is_admin(request.user)

    @admin.action(description="Resend the selected undelivered emails", permissions=["resend"])
    def resend(self, request, queryset) -> None:
        queued, refused = 0, []
        for email in queryset:
            try:
                services.email_resend(email_id=email.pk, by=request.user)
                queued += 1
            except (services.RefundError, PermissionDenied) as exc:
                refused.append(f"{email.key}: {exc}")
        if queued:
            self.message_user(request, f"Sending {queued} email(s) again.", messages.SUCCESS)
        for text in refused:
            self.message_user(request, text, messages.WARNING)


def _cents(amount: str) -> int:
    """'12.50' or '$12.50' -> 1250; anything else is a clear error."""
    try:
        return currencies.read_typed(amount, currencies.DESK)
    except currencies.BadAmount as exc:
        raise services.RefundError(str(exc)) from None


class CannedReasonTextInline(admin.TabularInline):
    """The reply in each other language the desk writes in: a customer who wrote in one it lacks
    is sent the English, and the reviewer is told so before they pick it."""

    model = CannedReasonText
    extra = 1
    verbose_name = "text in another language"
    verbose_name_plural = "texts in other languages (the text above is the English)"


@admin.register(CannedReason)
class CannedReasonAdmin(admin.ModelAdmin):
    """The replies reviewers pick when they reject, and agents when they set a message aside
    (`use`); the text is emailed to the customer, in their language where it has one."""

    inlines = [CannedReasonTextInline]
    list_display = ["title", "use", "text", "languages", "active", "position"]
    list_filter = ["use", "active"]
    list_editable = ["active", "position"]
    search_fields = ["title", "text"]

    def get_queryset(self, request):
        return super().get_queryset(request).prefetch_related("texts")

    @admin.display(description="Languages")
    def languages(self, canned: CannedReason) -> str:
        return ", ".join(["en", *(t.language for t in canned.texts.all())])
