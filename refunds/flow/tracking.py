"""The carrier's tracking lookup, cut off by a node `timeout` and handed to a person when it never
answers. No Django. A one-node async graph on a thread of its own: node timeouts need async
nodes, and the refund graph is sync (the fence lives in the savers' sync methods)."""

from __future__ import annotations

import asyncio
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from typing import TypedDict

from langgraph.errors import NodeError, NodeTimeoutError
from langgraph.graph import END, START, StateGraph
from langgraph.runtime import Runtime
from langgraph.types import RetryPolicy

from refunds.flow.state import Collaborators, RefundState, Tracking


@dataclass(frozen=True)
class TrackingOptions:
    timeout: float = 5.0  # seconds per attempt
    attempts: int = 2


class _Lookup(TypedDict, total=False):
    order_number: str
    tracking: Tracking


async def ask_carrier(state: _Lookup, runtime: Runtime[Collaborators]) -> _Lookup:
    assert runtime.context.track is not None
    answer = await runtime.context.track(state["order_number"])
    return {"tracking": {"status": "found", **answer}}


def carrier_failed(state: _Lookup, error: NodeError) -> _Lookup:
    """After the retries: no answer is not a failure of the refund; a person looks instead."""
    if isinstance(error.error, NodeTimeoutError):
        why = "the carrier did not answer in time"
    else:
        why = f"the carrier's lookup failed ({type(error.error).__name__}: {error.error})"
    return {"tracking": {"status": "unavailable", "error": why}}


def build_lookup(options: TrackingOptions):
    g = StateGraph(_Lookup, context_schema=Collaborators)
    g.add_node(
        "ask_carrier",
        ask_carrier,
        timeout=options.timeout,
        retry_policy=RetryPolicy(
            max_attempts=options.attempts,
            initial_interval=0.05,
            max_interval=1.0,
            retry_on=(NodeTimeoutError, ConnectionError, OSError),
        ),
        error_handler=carrier_failed,
    )
    g.add_edge(START, "ask_carrier")
    g.add_edge("ask_carrier", END)
    return g.compile(checkpointer=False)


def make_node(options: TrackingOptions):
    lookup = build_lookup(options)

    def carrier_tracking(state: RefundState, runtime: Runtime[Collaborators]) -> RefundState:
        if runtime.context.track is None:
            return {"trail": ["carrier_tracking"]}
        asked = lookup.ainvoke({"order_number": state["order_number"]}, context=runtime.context)
        with ThreadPoolExecutor(1) as pool:  # a thread of its own: a fresh loop, a clean context
            tracking: Tracking = pool.submit(asyncio.run, asked).result()["tracking"]
        update: RefundState = {"tracking": tracking, "trail": ["carrier_tracking"]}
        if tracking["status"] == "unavailable":
            update["flags"] = [
                f"No tracking: {tracking['error']}. A manager checks the delivery date."
            ]
        elif tracking.get("delivered_on") and tracking["delivered_on"] != state["order"].get(
            "delivered_on"
        ):
            update["flags"] = [
                f"The carrier says delivered on {tracking['delivered_on']}, the order says "
                f"{state['order']['delivered_on']}."
            ]
        else:
            update["notes"] = ["The carrier's tracking confirms the delivery date."]
        return update

    return carrier_tracking
