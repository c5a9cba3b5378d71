"""Tickets and decisions in the admin: each thread's history, retry, fork with a corrected
amount, and the canned replies reviewers pick."""

from django.contrib import admin, messages
from django.core.exceptions import PermissionDenied
from django.shortcuts import get_object_or_404, redirect, render
from django.urls import path, reverse
from django.utils.html import format_html, format_html_join

from core.admin import ReadOnly
from refunds import currencies, permissions, persistence, services
from refunds.admin.common import Dollars
from refunds.flow.words import dollars
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
