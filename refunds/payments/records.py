"""What a gateway says of one refund of a payment, the same for every gateway: the listing that
the ledger's pre-charge check and `manage.py reconcile` read (refunds/money.py,
refunds/services/reconcile.py)."""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime


@dataclass(frozen=True)
class ProcessorRefund:
    """One refund of a payment as the processor holds it now."""

    id: str  # the processor's id for it (Stripe's re_...; what the ledger keeps as the receipt)
    amount_cents: int
    # The processor's word (pending, requires_action, succeeded, failed, canceled; "" unsaid).
    status: str
    # The key the desk put on it (Stripe: our metadata key; a processor that keeps idempotency
    # keys: that key); "" when it carries none, as a refund made in a dashboard does.
    desk_key: str
    made_at: datetime | None = None
    failure_reason: str = ""
