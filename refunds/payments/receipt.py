"""What a gateway answers for a refund it accepted."""

from __future__ import annotations


class Receipt(str):
    """A receipt (a str, as the ledger stores it) with the status the processor said with it."""

    status: str

    def __new__(cls, receipt: str, status: str = "") -> Receipt:
        made = super().__new__(cls, receipt)
        made.status = status or ""
        return made


def processor_status_of(receipt: str) -> str:
    """The processor's status that came with a receipt; "" for a plain str."""
    return receipt.status if isinstance(receipt, Receipt) else ""
