from django.contrib import admin

from api.models import ApiToken


@admin.register(ApiToken)
class ApiTokenAdmin(admin.ModelAdmin):
    """Tokens are listed and can be revoked (deleted); never made or edited here: a user makes
    their own at /account/token/ and sees the key once. Only its hash is stored."""

    list_display = ["user", "hint", "created_at"]
    fields = readonly_fields = ("user", "hint", "created_at")

    def has_add_permission(self, request) -> bool:
        return False

    def has_change_permission(self, request, obj=None) -> bool:
        return False
