"""The refunds admin, one module a part as in refunds/models/."""

from refunds.admin import ledger, orders, outbox, tickets  # noqa: F401 (each registers)
