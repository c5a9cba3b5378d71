"""One base for the admin's read-only pages and inlines."""

from __future__ import annotations


class ReadOnly:
    """Rows the app writes are shown, never added, edited or deleted by hand: the checkpoint and
    the gateway are the truth they record."""

    def has_add_permission(self, request, obj=None) -> bool:
        return False

    def has_change_permission(self, request, obj=None) -> bool:
        return False

    def has_delete_permission(self, request, obj=None) -> bool:
        return False
