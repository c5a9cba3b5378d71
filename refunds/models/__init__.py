"""The desk's tables, one module a part of the design: orders (what was sold), tickets (the
desk's work on them: decisions, questions, forks), ledger (the money and the processor's word on
it), outbox (mail out, the audit trail, the sweep's runs)."""

from refunds.models.decisions import (
    CannedReason,
    CannedReasonQuerySet,
    CannedReasonText,
    CustomerQuestion,
    Decision,
    Fork,
    UnappliedQuerySet,
    resume_value,
)
from refunds.models.ledger import (
    Charge,
    ChargePart,
    ChargeQuerySet,
    OutsideRefund,
    OutsideRefundQuerySet,
    PaymentDispute,
    ReconcileRun,
    StripeEvent,
    StripeEventQuerySet,
)
from refunds.models.orders import (
    ORDER_NUMBER_MAX,
    ORDER_NUMBER_PATTERN,
    Order,
    OrderLine,
    of_customer,
    order_number_read,
    same_customer,
)
from refunds.models.outbox import (
    AuditEvent,
    Email,
    SweepRun,
)
from refunds.models.tickets import (
    ADMIN_GROUP,
    ROLE_GROUPS,
    Role,
    Ticket,
    TicketOrder,
    TicketQuerySet,
    user_roles,
)

# The demo processor's table lives beside its gateway; Django registers a model when the app's
# models module imports it.
from refunds.payments.demo import DemoProcessorDispute, DemoProcessorRefund  # noqa: E402

__all__ = [
    "ORDER_NUMBER_MAX",
    "ORDER_NUMBER_PATTERN",
    "order_number_read",
    "same_customer",
    "of_customer",
    "Order",
    "OrderLine",
    "ChargeQuerySet",
    "Charge",
    "ChargePart",
    "OutsideRefundQuerySet",
    "OutsideRefund",
    "PaymentDispute",
    "ReconcileRun",
    "StripeEventQuerySet",
    "StripeEvent",
    "Role",
    "ROLE_GROUPS",
    "ADMIN_GROUP",
    "TicketQuerySet",
    "Ticket",
    "user_roles",
    "TicketOrder",
    "UnappliedQuerySet",
    "Decision",
    "resume_value",
    "CannedReasonQuerySet",
    "CannedReason",
    "CannedReasonText",
    "CustomerQuestion",
    "Fork",
    "Email",
    "AuditEvent",
    "SweepRun",
    "DemoProcessorDispute",
    "DemoProcessorRefund",
]
