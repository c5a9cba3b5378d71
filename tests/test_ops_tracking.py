"""The carrier's tracking lookup: cut off by LangGraph's node timeout, retried, and then routed to
a person (a manager reviews) instead of failing the run."""

from __future__ import annotations

import asyncio
import time

import pytest

from refunds import enqueue, persistence, runner, services
from refunds.models import Ticket

CALLS: list[str] = []


class HangingCarrier:
    """A carrier that never answers."""

    async def track(self, order_number: str) -> dict:
        CALLS.append(order_number)
        await asyncio.sleep(60)
        return {}


class PromptCarrier:
    async def track(self, order_number: str) -> dict:
        CALLS.append(order_number)
        return {"delivered_on": "2026-11-06"}


@pytest.fixture(autouse=True)
def carrier(settings, monkeypatch):
    monkeypatch.setattr(enqueue, "wake", lambda ticket_id: None)
    settings.REFUNDS_CARRIER_TIMEOUT = 0.3
    settings.REFUNDS_CARRIER_ATTEMPTS = 2
    CALLS.clear()
    yield settings
    settings.REFUNDS_CARRIER = ""
    persistence._compiled.cache_clear()


def test_a_carrier_that_hangs_is_cut_off_and_the_ticket_goes_to_a_manager(
    carrier, transactional_db, agent, late_order
):
    carrier.REFUNDS_CARRIER = "tests.test_ops_tracking.HangingCarrier"
    ticket = services.ticket_open(order_number="1042", opened_by=agent)
    started = time.monotonic()
    assert runner.advance(ticket.pk) == "awaiting_review"  # not "error", not "failed"
    assert time.monotonic() - started < 10
    assert CALLS == ["1042", "1042"]  # the retry policy tried twice
    ticket = Ticket.objects.get(pk=ticket.pk)
    assert ticket.required_role == "manager"  # $6.99, but a person checks the delivery
    assert "check_order:1042" in ticket.nodes_run  # the carrier is one of the order's checks
    assert any("did not answer in time" in f for f in ticket.pending_payload["flags"])
    state = persistence.snapshot(ticket.thread_id).values
    assert state["checks"]["1042"]["tracking"]["status"] == "unavailable"
    assert state["tracking"]["status"] == "unavailable"


def test_a_carrier_that_answers_confirms_the_delivery(carrier, transactional_db, agent, late_order):
    carrier.REFUNDS_CARRIER = "tests.test_ops_tracking.PromptCarrier"
    ticket = services.ticket_open(order_number="1042", opened_by=agent)
    assert runner.advance(ticket.pk) == "awaiting_review"
    ticket = Ticket.objects.get(pk=ticket.pk)
    assert ticket.required_role == "agent" and CALLS == ["1042"]
    assert "The carrier's tracking confirms the delivery date." in ticket.pending_payload["notes"]
