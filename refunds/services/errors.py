"""What services refuse with: messages shown to the user as they are."""

from __future__ import annotations

from refunds.models import Ticket

NOTE_MAX = 2000
REASON_MAX = 1000


class RefundError(ValueError):
    """Bad input or a request that no longer applies; the message is shown to the user."""


class AlreadyDecided(RefundError):
    pass


class OrdersRefused(RefundError):
    """Well-formed order numbers the desk's orders refuse (the API answers 422, not 400)."""


class TicketAlreadyOpen(RefundError):
    """The order has an open ticket: at most one per order. `ticket` is that one."""

    def __init__(self, ticket: Ticket, *, note_kept: bool = False, number: str = ""):
        self.ticket = ticket
        self.note_kept = note_kept
        self.number = number or ticket.order.number  # the order asked for that it covers
        kept = " Your note is added to its timeline." if note_kept else ""
        super().__init__(
            f"Order {self.number} already has an open ticket ({ticket.pk}, "
            f"{ticket.get_status_display().lower()}); it is shown instead of a new one.{kept}"
        )


class ShopUnavailable(RefundError):
    """The order source could not give the order; the message says why."""


class ClaimTaken(RefundError):
    """A colleague holds a live claim on this review."""


class BrokerUnavailable(RuntimeError):
    def __init__(self, message: str, *, sent: int = 0):
        super().__init__(message)
        self.sent = sent
