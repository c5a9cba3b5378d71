"""The uncompiled refund workflow (refunds/persistence/ compiles it). `wrap` wraps every node:
the app's closes LangGraph threads' connections; tests add crash points inside it."""

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
    """`tracking`: add the carrier's lookup to each order's checks; None leaves it out."""

    def node(name: str, fn: Callable | None = None) -> Callable:
        fn = fn or getattr(nodes, name)
        return wrap(name, fn) if wrap else fn

    g = StateGraph(RefundState, context_schema=Collaborators)
    # One order or several, one path: a check_order and a charge_order per order.
    carrier = make_node(tracking) if tracking is not None else None
    g.add_node("check_order", node("check_order", nodes.make_check_order(carrier)))
    g.add_node("gather", node("gather"))
    g.add_node("decline", node("decline"))
    g.add_node("triage", node("triage"))
    g.add_node("received", node("received"), retry_policy=nodes.MAIL_RETRY)
    g.add_node("approve", node("approve"))
    g.add_node("charge_order", node("charge_order"), retry_policy=nodes.CHARGE_RETRY)
    g.add_node("settle_charges", node("settle_charges"))
    g.add_node("email", node("email"), retry_policy=nodes.MAIL_RETRY)
    g.add_node("notify", node("notify"), retry_policy=nodes.MAIL_RETRY)
    g.add_node("ask_customer", node("ask_customer"), retry_policy=nodes.MAIL_RETRY)
    g.add_node("await_reply", node("await_reply"))
    g.add_node("close_no_reply", node("close_no_reply"), retry_policy=nodes.MAIL_RETRY)
    g.add_node("await_reopen", node("await_reopen"))
    g.add_node("ask_return", node("ask_return"), retry_policy=nodes.MAIL_RETRY)
    g.add_node("await_return", node("await_return"))
    g.add_node("offer_credit", node("offer_credit"), retry_policy=nodes.MAIL_RETRY)
    g.add_node("await_choice", node("await_choice"))
    g.add_conditional_edges(START, nodes.fan_out, ["check_order"])
    g.add_edge("check_order", "gather")
    g.add_conditional_edges("gather", nodes.route_gathered, ["decline", "triage"])
    g.add_edge("decline", "notify")
    g.add_edge("received", "approve")
    g.add_conditional_edges(
        "approve",
        nodes.after_review,
        [
            "charge_order",
            "email",
            "notify",
            "ask_customer",
            "ask_return",
            "offer_credit",
            "approve",
        ],
    )
    # await_reply routes by Command: to the review, or to the close for want of a reply;
    # await_return to the charges of what came back (or the offer), or to the review;
    # offer_credit and await_choice to the charges, each order paid as the customer chose.
    g.add_edge("close_no_reply", "await_reopen")
    g.add_edge("await_reopen", "approve")
    g.add_edge("charge_order", "settle_charges")
    g.add_edge("notify", END)
    g.add_edge("email", END)
    return g
