"""The mirror is built from a run's own stream events (no read of the checkpointer after the
run); it must equal the mirror built from get_state, at every step of every path of the graph."""

from __future__ import annotations

import pytest
from langgraph.types import Command

from refunds import mirror
from refunds.flow import nodes
from refunds.flow.errors import MailRetryable, PermanentGatewayError, RetryableGatewayError
from tests.reviewing import in_one_shape
from tests.test_graph import TICKET, Desk, FakeGateway, FakeMailer, order_facts


@pytest.fixture(autouse=True)
def fast_retries(monkeypatch):
    for name in ("CHARGE_RETRY", "MAIL_RETRY"):
        policy = getattr(nodes, name)
        monkeypatch.setattr(
            nodes, name, policy._replace(initial_interval=0.0, max_interval=0.0, jitter=False)
        )


def step_by_step(desk: Desk, graph_input) -> int:
    """Run one step per stream call until the thread waits on a person or ends, comparing the
    two mirrors after every step. Returns how many steps were compared."""
    compared = 0
    while True:
        events = mirror.RunEvents()
        for mode, chunk in desk.graph.stream(
            graph_input,
            desk.config,
            context=desk.context,
            durability="sync",
            stream_mode=mirror.RunEvents.MODES,
            interrupt_after="*",
        ):
            events.see(mode, chunk)
        from_events = mirror.fields(events.outcome())
        from_state = mirror.fields(desk.state())
        assert from_events == from_state, (compared, from_events, from_state)
        compared += 1
        state = desk.state()
        if state.interrupts or not mirror.has_work(state):
            return compared
        graph_input = None


def answer(desk: Desk, verdict: str, reviewer: str = "agent", reason: str = "") -> Command:
    pending = desk.state().interrupts[0]
    value = {"answer": verdict, "reviewer": reviewer, "reason": reason}
    return Command(resume={pending.id: in_one_shape(pending.value, value)})


START = {
    "ticket_key": TICKET,
    "order_number": "1042",
    "order_numbers": ["1042"],
    "note": "late",
    "flow_version": 1,
}


@pytest.mark.parametrize(
    ("order", "gateway", "mailer", "verdicts", "outcome"),
    [
        (order_facts(), None, None, ["approve"], "refunded"),
        (order_facts(), None, None, ["reject"], "rejected"),
        (order_facts(late=0), None, None, [], "declined"),
        (order_facts(refunded_cents=699, refunded_by_ticket=3), None, None, [], "declined"),
        (order_facts(fee_cents=15_000), None, None, ["approve"], "refunded"),
        (
            order_facts(),
            FakeGateway([PermanentGatewayError("card declined")]),
            None,
            ["approve", "approve"],
            "refunded",
        ),
        (
            order_facts(),
            # Down through every attempt (the retries here do not sleep): back to a manager.
            FakeGateway([RetryableGatewayError("503")] * nodes.CHARGE_RETRY.max_attempts),
            None,
            ["approve", "reject"],
            "rejected",
        ),
        (order_facts(), None, FakeMailer([MailRetryable("451")] * 4), ["approve"], "refunded"),
    ],
    ids=[
        "approved",
        "rejected",
        "declined",
        "refunded-before",
        "flagged",
        "card-declined",
        "gateway-down",
        "mail-down",
    ],
)
def test_the_mirror_from_run_events_equals_the_mirror_from_get_state_at_every_step(
    order, gateway, mailer, verdicts, outcome
):
    desk = Desk(order, gateway=gateway, mailer=mailer)
    steps = step_by_step(desk, START)
    for verdict in verdicts:
        steps += step_by_step(desk, answer(desk, verdict, reason="no"))
    assert mirror.fields(desk.state())["status"] == outcome
    assert steps >= 4  # check_order, gather, decline, notify at the least
