"""What a gateway answers for a refund it accepted."""

from __future__ import annotations


class Receipt(str):
    """A refund's receipt (the processor's id for it, a str as the ledger stores it), with what
    the processor said of the refund in the same answer: Stripe's Refund.status ("pending",
    "succeeded", ...), "" where the gateway says nothing. The ledger records that status when it
    settles the charge (refunds/money.py), by the same forward-only rule as Stripe's events."""

    status: str

    def __new__(cls, receipt: str, status: str = "") -> Receipt:
        made = super().__new__(cls, receipt)
        made.status = status or ""
        return made

    def __reduce__(self):  # pickled (a Celery result, a cache) with its status
        return (Receipt, (str(self), self.status))


def processor_status_of(receipt: str) -> str:
    """The processor's status that came with a receipt; "" when the gateway answered a plain
    str (a gateway that reports none)."""
    return receipt.status if isinstance(receipt, Receipt) else ""
