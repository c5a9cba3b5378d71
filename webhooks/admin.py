from django import forms
from django.contrib import admin, messages
from django.core.exceptions import PermissionDenied
from django.db import models
from django.shortcuts import get_object_or_404, redirect, render
from django.urls import path, reverse
from django.utils.html import format_html

from core.admin import ReadOnly
from refunds import permissions
from webhooks import delivery as outbox
from webhooks.models import Attempt, Delivery, Endpoint


def admins_only(self, request, obj=None) -> bool:
    """Webhooks are the admins' alone: an endpoint's secret signs what the desk says."""
    return permissions.is_admin(request.user)


@admin.register(Endpoint)
class EndpointAdmin(admin.ModelAdmin):
    list_display = ["url", "description", "active", "created_at"]
    list_filter = ["active"]
    readonly_fields = ["signing_secret", "created_at"]
    fields = ["url", "description", "statuses", "active", "signing_secret", "created_at"]
    # A URL typed without a scheme means https: plain http is refused outside the demo. A plain
    # input: admin's URL widget would put a refused (inside) URL on the page as a link.
    formfield_overrides = {
        models.URLField: {
            "assume_scheme": "https",
            "widget": forms.URLInput(attrs={"class": "vURLField"}),
        }
    }

    @admin.display(description="Signing secret")
    def signing_secret(self, endpoint: Endpoint) -> str:
        if not endpoint.pk:
            return "Made when you save; give it to the receiver to check signatures."
        return format_html("<code>{}</code>", endpoint.secret)

    has_module_permission = has_view_permission = has_add_permission = admins_only
    has_change_permission = has_delete_permission = admins_only


class AttemptInline(ReadOnly, admin.TabularInline):
    model = Attempt
    fields = readonly_fields = ("at", "status_code", "error", "response_body", "duration_ms")
    verbose_name_plural = "delivery log"


@admin.register(Delivery)
class DeliveryAdmin(ReadOnly, admin.ModelAdmin):
    list_display = [
        "event_id",
        "ticket_id",
        "to_status",
        "endpoint",
        "status",
        "attempts",
        "last_status_code",
        "next_attempt_at",
    ]
    list_filter = ["status", "endpoint"]
    list_select_related = ["event", "endpoint"]
    fields = (
        "event_id",
        "ticket_id",
        "to_status",
        "endpoint",
        "status",
        "attempts",
        "next_attempt_at",
        "sent_at",
        "last_status_code",
        "last_error",
        "send_again_button",
    )
    inlines = [AttemptInline]
    actions = ["send_again"]

    @admin.display(description="Event id")
    def event_id(self, delivery: Delivery) -> str:
        return delivery.event.event_id

    @admin.display(description="Ticket")
    def ticket_id(self, delivery: Delivery) -> int:  # the number, not the field "ticket"
        return delivery.event.ticket_id

    @admin.display(description="Status sent")
    def to_status(self, delivery: Delivery) -> str:
        return delivery.event.to_status

    @admin.display(description="Send again")
    def send_again_button(self, delivery: Delivery) -> str:
        url = reverse("admin:webhooks_delivery_send_again", args=[delivery.pk])
        return format_html('<a class="button" href="{}">Send again</a>', url)

    has_module_permission = has_view_permission = has_send_again_permission = admins_only

    @admin.action(description="Send the selected deliveries again", permissions=["send_again"])
    def send_again(self, request, queryset) -> None:
        count = outbox.send_again(list(queryset.values_list("pk", flat=True)))
        self.message_user(request, f"{count} delivery(ies) will be sent again.", messages.SUCCESS)

    def get_urls(self):
        view = self.admin_site.admin_view(self.send_again_view)
        return [
            path("<int:delivery_id>/send-again/", view, name="webhooks_delivery_send_again"),
            *super().get_urls(),
        ]

    def send_again_view(self, request, delivery_id: int):
        """A confirmation page (GET) and its POST: a link never changes anything by itself."""
        if not self.has_send_again_permission(request):
            raise PermissionDenied("Only admins send webhooks again.")
        delivery = get_object_or_404(
            Delivery.objects.select_related("event", "endpoint"), pk=delivery_id
        )
        if request.method == "POST":
            outbox.send_again([delivery.pk])
            self.message_user(request, f"{delivery} will be sent again.", messages.SUCCESS)
            return redirect("admin:webhooks_delivery_change", delivery.pk)
        context = {
            **self.admin_site.each_context(request),
            "title": f"Send {delivery.event.event_id} to {delivery.endpoint} again?",
            "delivery": delivery,
            "opts": self.model._meta,
        }
        return render(request, "admin/webhooks/delivery/send_again.html", context)
