"""The outbox in the admin: customers' emails and resending them."""

from django.contrib import admin, messages
from django.core.exceptions import PermissionDenied
from django.urls import reverse
from django.utils.html import format_html

from core.admin import ReadOnly
from refunds import outbox, permissions, services
from refunds.models import Email


@admin.register(Email)
class EmailAdmin(ReadOnly, admin.ModelAdmin):
    # Five columns fit a 1280 px screen; the rest is on each email's own page.
    list_display = ["subject", "to", "regarding", "status", "sent_at"]
    list_filter = ["status"]
    search_fields = ["key", "to"]
    exclude = ["kind", "event", "endpoint", "next_attempt_at", "last_status_code"]  # webhooks'
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
