"""Tickets, decisions and canned replies in the admin."""

from django.contrib import admin, messages
from django.urls import reverse
from django.utils.html import format_html

from core.admin import ReadOnly
from refunds import forks, permissions, services
from refunds.admin.common import Dollars
from refunds.models import (
    CannedReason,
    CannedReasonText,
    Charge,
    Decision,
    Email,
    Fork,
    Ticket,
    TicketOrder,
)
from refunds.money import money_moved


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
        "history",
    ]
    inlines = [TicketOrderInline, DecisionInline, ForkInline, ChargeInline, EmailInline]
    actions = ["retry_failed"]

    @admin.display(description="History and fork")
    def history(self, ticket: Ticket) -> str:
        """The ops pages hold the history and the fork, one path each."""
        links = format_html(
            '<a href="{}">The history, with branches and forks</a>',
            reverse("ops:history", args=[ticket.pk]),
        )
        forkable = ticket.status in services.FORKABLE and money_moved(ticket) is None
        base = forks.fork_base(ticket.thread_id) if forkable else None
        if base is None:
            return links
        return format_html(
            '{} <a class="button" href="{}?checkpoint={}">Fork with a corrected amount</a>',
            links,
            reverse("ops:fork", args=[ticket.pk]),
            base.config["configurable"]["checkpoint_id"],
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


class CannedReasonTextInline(admin.TabularInline):
    """A customer who wrote in a language the reply lacks is sent the English."""

    model = CannedReasonText
    extra = 1
    verbose_name = "text in another language"
    verbose_name_plural = "texts in other languages (the text above is the English)"


@admin.register(CannedReason)
class CannedReasonAdmin(admin.ModelAdmin):
    """The replies reviewers pick when they reject, and agents when they set a message aside."""

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
