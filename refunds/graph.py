"""build_graph(): the uncompiled refund workflow; runner.py compiles it with a checkpointer."""

from __future__ import annotations

from langgraph.graph import END, START, StateGraph
from langgraph.types import RetryPolicy

from refunds import nodes
from refunds.payments_errors import RetryableGatewayError
from refunds.state import Collaborators, RefundState

CHARGE_RETRY = RetryPolicy(
    max_attempts=3, initial_interval=0.2, max_interval=2.0, retry_on=RetryableGatewayError
)


def build_graph() -> StateGraph:
    g = StateGraph(RefundState, context_schema=Collaborators)
    g.add_node("lookup", nodes.lookup)
    g.add_node("fraud_check", nodes.fraud_check)
    g.add_node("history_check", nodes.history_check)
    g.add_node("check_policy", nodes.check_policy)
    g.add_node("decline", nodes.decline)
    g.add_node("triage", nodes.triage)
    g.add_node("approve", nodes.approve)
    g.add_node(
        "charge_card",
        nodes.charge_card,
        retry_policy=CHARGE_RETRY,
        error_handler=nodes.payment_failed,
    )
    g.add_node("email", nodes.email)
    g.add_node("notify", nodes.notify)

    g.add_edge(START, "lookup")
    # Two edges out: the fraud and history checks run in the same step.
    g.add_edge("lookup", "fraud_check")
    g.add_edge("lookup", "history_check")
    g.add_edge(["fraud_check", "history_check"], "check_policy")
    g.add_conditional_edges("check_policy", nodes.route_policy, ["decline", "triage"])
    g.add_edge("decline", "notify")
    g.add_conditional_edges("approve", nodes.route_decision, ["charge_card", "notify"])
    g.add_edge("notify", END)
    g.add_edge("charge_card", "email")
    g.add_edge("email", END)
    return g
