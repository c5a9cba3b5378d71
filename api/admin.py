from django.contrib import admin

from api.models import ApiToken
from core.admin import ReadOnly


@admin.register(ApiToken)
class ApiTokenAdmin(ReadOnly, admin.ModelAdmin):
    """Tokens are listed and can be revoked (deleted); never made or edited here: a user makes
    their own at /account/token/ and sees the key once. Only its hash is stored."""

    list_display = ["user", "hint", "created_at"]
    fields = readonly_fields = ("user", "hint", "created_at")
    has_delete_permission = admin.ModelAdmin.has_delete_permission  # revoking is deleting
