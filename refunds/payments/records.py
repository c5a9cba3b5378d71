"""One refund, or one dispute, of a payment, as every gateway lists them."""

from __future__ import annotations

from dataclasses import dataclass
from datetime import UTC, datetime


@dataclass(frozen=True)
class ProcessorRefund:
    """One refund of a payment as the processor holds it now."""

    id: str  # the processor's id for it (Stripe's re_...; what the ledger keeps as the receipt)
    amount_cents: int
    # The processor's word (pending, requires_action, succeeded, failed, canceled; "" unsaid).
    status: str
    # The key the desk put on it; "" for none, as a refund made in a dashboard.
    desk_key: str
    made_at: datetime | None = None
    failure_reason: str = ""


# Stripe's words for a dispute still open: the card's bank may yet give the customer the money.
DISPUTE_OPEN = frozenset(
    {"needs_response", "warning_needs_response", "under_review", "warning_under_review"}
)


@dataclass(frozen=True)
class ProcessorDispute:
    """While it is open, a refund may pay the customer twice (the desk, the card's bank)."""

    id: str  # the processor's id for it (Stripe's dp_...)
    status: str  # the processor's word (DISPUTE_OPEN, or won, lost, ...)
    amount_cents: int = 0
    reason: str = ""  # the processor's code for why (fraudulent, product_not_received, ...)
    opened_at: datetime | None = None

    @property
    def open(self) -> bool:
        return self.status in DISPUTE_OPEN


def unix_time(seconds: float | str | None) -> datetime | None:
    """A processor's Unix time (`created`), None when it gives none."""
    return datetime.fromtimestamp(float(seconds), tz=UTC) if seconds else None
