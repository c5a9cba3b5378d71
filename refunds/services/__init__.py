"""Writes that views, the API, the admin and the sweep call, one module per concern."""

# ruff: noqa: F401 (the imports are what the package exports)

from refunds.services.asking import questions_wait_timers
from refunds.services.credit import credit_choose, offers_wait_timers
from refunds.services.desk import (
    NOT_PENDING,
    decision_undo,
    review_answers,
    review_claim,
    review_orders,
    review_unclaim,
    reviews_approve_bulk,
    ticket_ask,
    ticket_decide,
    ticket_escalate,
)
from refunds.services.errors import (
    NOTE_MAX,
    REASON_MAX,
    AlreadyDecided,
    BrokerUnavailable,
    ClaimTaken,
    OrdersRefused,
    RefundError,
    ShopUnavailable,
    TicketAlreadyOpen,
)
from refunds.services.reconcile import ReconcileReport, reconcile_payments
from refunds.services.returns import (
    Arrival,
    Back,
    return_arrived,
    return_find,
    returns_wait_timers,
)
from refunds.services.stripe_events import (
    stripe_event_handle,
    stripe_event_receive,
    stripe_events_recover,
)
from refunds.services.sweep import (
    RECOVERY_SWEEP,
    also_recover,
    sweep_mark_ran,
    tickets_recover,
    wake_all,
)
from refunds.services.tickets import (
    FORKABLE,
    email_resend,
    fork_checked,
    order_find,
    ticket_fork,
    ticket_open,
    ticket_retry,
)
from refunds.services.timers import reviews_escalate_overdue
