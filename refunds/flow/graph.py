"""build_graph(): the uncompiled refund workflow; refunds/persistence.py compiles it with a
checkpointer. `wrap` puts a wrapper around every node: the app's closes the database connections
of LangGraph's own threads, tests and crashtest add their hooks (crash points) inside it."""

from __future__ import annotations

from collections.abc import Callable

from langgraph.graph import END, START, StateGraph

from refunds.flow import nodes
from refunds.flow.state import Collaborators, RefundState
from refunds.flow.tracking import TrackingOptions, make_node

NodeWrapper = Callable[[str, Callable], Callable]


def build_graph(
    wrap: NodeWrapper | None = None, tracking: TrackingOptions | None = None
) -> StateGraph[RefundState, Collaborators]:
    """`tracking`: add the carrier's tracking lookup beside the fraud and history checks (a
    desk with a carrier configured); None leaves it out."""

    def node(name: str) -> Callable:
        fn = getattr(nodes, name)
        return wrap(name, fn) if wrap else fn

    g = StateGraph(RefundState, context_schema=Collaborators)
    g.add_node("lookup", node("lookup"))
    g.add_node("fraud_check", node("fraud_check"))
    g.add_node("history_check", node("history_check"))
    g.add_node("check_policy", node("check_policy"))
    g.add_node("decline", node("decline"))
    g.add_node("triage", node("triage"))
    g.add_node("approve", node("approve"))
    g.add_node("charge_card", node("charge_card"), retry_policy=nodes.CHARGE_RETRY)
    g.add_node("email", node("email"), retry_policy=nodes.MAIL_RETRY)
    g.add_node("notify", node("notify"), retry_policy=nodes.MAIL_RETRY)

    # A ticket of several orders (flow version 4) fans out here: one check_order per order,
    # gathered by `checks`' reducer; later its charges fan out the same way.
    g.add_node("check_order", node("check_order"))
    g.add_node("gather", node("gather"))
    g.add_node("charge_order", node("charge_order"), retry_policy=nodes.CHARGE_RETRY)
    g.add_node("settle_charges", node("settle_charges"))
    g.add_conditional_edges(START, nodes.fan_out, ["lookup", "check_order"])
    g.add_edge("check_order", "gather")
    g.add_conditional_edges("gather", nodes.route_gathered, ["decline", "triage"])
    g.add_edge("charge_order", "settle_charges")
    # Two edges out: the fraud and history checks run in the same step.
    g.add_edge("lookup", "fraud_check")
    g.add_edge("lookup", "history_check")
    if tracking is None:
        g.add_edge(["fraud_check", "history_check"], "check_policy")
    else:
        fn = make_node(tracking)
        g.add_node("carrier_tracking", wrap("carrier_tracking", fn) if wrap else fn)
        g.add_edge("lookup", "carrier_tracking")
        g.add_edge(["fraud_check", "history_check", "carrier_tracking"], "check_policy")
    g.add_conditional_edges("check_policy", nodes.route_policy, ["decline", "triage"])
    g.add_edge("decline", "notify")
    g.add_conditional_edges(
        "approve", nodes.route_decision, ["charge_card", "charge_order", "email", "notify"]
    )
    g.add_edge("notify", END)
    g.add_edge("email", END)
    return g
