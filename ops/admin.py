from django.contrib import admin

from core.admin import ReadOnly
from ops.models import Erasure


@admin.register(Erasure)
class ErasureAdmin(ReadOnly, admin.ModelAdmin):
    """Erasures as the workflow records them; asked for on a customer's page, never here."""

    list_display = [
        "id",
        "kind",
        "status",
        "pseudonym",
        "requested_by",
        "requested_at",
        "finished_at",
    ]
    list_filter = ["kind", "status"]
    search_fields = ["email", "pseudonym", "requested_by"]
    readonly_fields = [f.name for f in Erasure._meta.fields]
