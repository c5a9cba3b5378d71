"""The refund graph's node functions, one module per concern: `checks` (pure reads before the
review), `review` (triage and the interrupt), `charge` (money moved once per key), `messages`
(what the customer is told). Each node returns only the keys it changes; collaborators come from
the runtime context. No Django imports: the graph runs against fakes in memory for tests.

One order runs lookup, fraud_check, history_check and check_policy as graph nodes, then
triage, approve, charge_card and email (or decline and notify). Several fan out: `fan_out`
sends one check_order per order (the same checks, on that order alone), `gather` sums them up
for triage, the one review answers per order, `send_charges` sends one charge_order per
approved order, and `settle_charges` sends the refused ones back to a manager or goes on to
the one email that lists every order."""

from refunds.flow.nodes.charge import (
    CHARGE_RETRY,
    charge_card,
    charge_key,
    charge_order,
    order_charge_key,
    send_charges,
    settle_charges,
)
from refunds.flow.nodes.checks import (
    check_order,
    check_policy,
    decline,
    fan_out,
    fraud_check,
    gather,
    history_check,
    lookup,
    route_gathered,
    route_policy,
)
from refunds.flow.nodes.common import customer_namespace
from refunds.flow.nodes.messages import MAIL_RETRY, email, notify
from refunds.flow.nodes.review import approve, review_request, route_decision, triage

__all__ = [
    "CHARGE_RETRY",
    "MAIL_RETRY",
    "approve",
    "charge_card",
    "charge_key",
    "charge_order",
    "check_order",
    "check_policy",
    "customer_namespace",
    "decline",
    "email",
    "fan_out",
    "fraud_check",
    "gather",
    "history_check",
    "lookup",
    "notify",
    "order_charge_key",
    "review_request",
    "route_decision",
    "route_gathered",
    "route_policy",
    "send_charges",
    "settle_charges",
    "triage",
]
