from django.contrib import admin

from api.models import ApiToken
from core.admin import ReadOnly


@admin.register(ApiToken)
class ApiTokenAdmin(ReadOnly, admin.ModelAdmin):
    """Listed and revoked (deleted) here; a user makes their own at /account/token/."""

    list_display = ["user", "hint", "created_at"]
    fields = readonly_fields = ("user", "hint", "created_at")
    has_delete_permission = admin.ModelAdmin.has_delete_permission  # revoking is deleting
