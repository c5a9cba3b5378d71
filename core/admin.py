"""One base for the admin's read-only pages and inlines."""

from __future__ import annotations


class ReadOnly:
    """Rows the app writes (the mirror, the ledger, decisions, the outbox, deliveries) are shown,
    never added, edited or deleted by hand: the checkpoint and the gateway are the truth they
    record. An inline under it shows no blank rows and no delete boxes (Django drops them when
    adding and deleting are refused)."""

    def has_add_permission(self, request, obj=None) -> bool:
        return False

    def has_change_permission(self, request, obj=None) -> bool:
        return False

    def has_delete_permission(self, request, obj=None) -> bool:
        return False
