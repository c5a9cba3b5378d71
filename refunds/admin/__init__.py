"""The refunds admin, one module a part of the design as in refunds/models/; Django's
autodiscovery imports this package, which imports each."""

from refunds.admin import ledger, orders, outbox, tickets

__all__ = ["ledger", "orders", "outbox", "tickets"]
