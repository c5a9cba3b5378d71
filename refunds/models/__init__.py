"""The desk's tables: orders, tickets and their decisions, the ledger, the outbox and audit."""

# ruff: noqa: F401 (the imports are what the package exports)

from refunds.models.decisions import (
    CannedReason,
    CannedReasonText,
    CreditOffer,
    CustomerQuestion,
    Decision,
    Fork,
    ReturnRequest,
    resume_value,
)
from refunds.models.ledger import (
    Charge,
    ChargePart,
    OutsideRefund,
    PaymentDispute,
    ReconcileRun,
    StoreCredit,
    StripeEvent,
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

# The demo processor's tables live beside its gateway; importing them here registers them.
from refunds.payments.demo import DemoProcessorDispute, DemoProcessorRefund
