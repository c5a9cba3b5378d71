"""The refund graph's nodes. No Django: tests run the graph against fakes."""

# ruff: noqa: F401 (the imports are what the package exports)

from refunds.flow.nodes.asking import (
    after_review,
    ask_customer,
    await_reopen,
    await_reply,
    close_key,
    close_no_reply,
)
from refunds.flow.nodes.charge import (
    CHARGE_RETRY,
    charge_key,
    charge_order,
    send_charges,
    settle_charges,
)
from refunds.flow.nodes.checks import decline, fan_out, gather, make_check_order, route_gathered
from refunds.flow.nodes.common import customer_namespace
from refunds.flow.nodes.credit import await_choice, offer_credit
from refunds.flow.nodes.messages import MAIL_RETRY, email, notify, received
from refunds.flow.nodes.returns import ask_return, await_return
from refunds.flow.nodes.review import approve, review_request, triage
