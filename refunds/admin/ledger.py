"""The ledger in the admin."""

from django.contrib import admin
from django.utils.html import format_html

from core.admin import ReadOnly
from refunds.admin.common import Dollars
from refunds.models import Charge, ReconcileRun, StripeEvent
from refunds.payments.demo import DemoProcessorDispute


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


@admin.register(DemoProcessorDispute)
class DemoProcessorDisputeAdmin(admin.ModelAdmin):
    """Add one to mark a payment disputed, as a customer's bank does at Stripe."""

    list_display = ("payment_reference", "status", "created_at")
