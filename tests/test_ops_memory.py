"""Customer memory in the LangGraph store: each refund remembered per customer across threads;
the third refund within 30 days goes to a manager; the review card and the customer page show it."""

from __future__ import annotations

from datetime import date, timedelta

import pytest
from django.urls import reverse

from refunds import enqueue, persistence, runner, services
from refunds.flow.nodes import customer_namespace
from refunds.models import Ticket
from tests.conftest import make_order


@pytest.fixture(autouse=True)
def no_broker(monkeypatch):
    monkeypatch.setattr(enqueue, "wake", lambda ticket_id: None)


def remember(email: str, key: str, cents: int, days_ago: int) -> None:
    on = (date.today() - timedelta(days=days_ago)).isoformat()
    persistence.store().put(
        customer_namespace(email), key, {"amount_cents": cents, "order": key, "refunded_on": on}
    )


def opened(agent, number: str) -> Ticket:
    ticket = services.ticket_open(order_number=number, opened_by=agent)
    assert runner.advance(ticket.pk) == "awaiting_review"
    ticket.refresh_from_db()
    return ticket


def test_the_third_refund_within_30_days_goes_to_a_manager(
    client, transactional_db, agent, manager, late_order
):
    remember("ana@example.com", "refund-900-a", 500, days_ago=3)
    remember("ana@example.com", "refund-901-b", 700, days_ago=20)
    ticket = opened(agent, "1042")  # $6.99: an agent's, were it not for the memory
    assert ticket.required_role == "manager"
    payload = ticket.pending_payload
    assert payload["history"] == {"refunds": 2, "total_cents": 1200, "recent": 2}
    assert any("number 3 within 30 days" in f for f in payload["flags"])
    client.force_login(manager)
    card = client.get(reverse("reviews:ticket", args=[ticket.pk])).content.decode()
    assert "Earlier refunds to this customer: 2 ($12.00), 2 in the last 30 days" in card


def test_refunds_older_than_30_days_do_not_escalate(transactional_db, agent, late_order):
    remember("ana@example.com", "refund-900-a", 500, days_ago=45)
    remember("ana@example.com", "refund-901-b", 700, days_ago=60)
    ticket = opened(agent, "1042")
    assert ticket.required_role == "agent"
    assert ticket.pending_payload["history"]["recent"] == 0


def test_a_refund_is_remembered_and_shown_on_the_customer_page(
    client, transactional_db, agent, admin_user, late_order
):
    ticket = opened(agent, "1042")
    services.ticket_decide(
        ticket=ticket,
        interrupt_id=ticket.pending_interrupt_id,
        reviewer=admin_user,
        orders=services.review_answers(ticket, answer="approve"),
    )
    assert runner.advance(ticket.pk) == "refunded"
    make_order("1050", fee_cents=300)
    second = opened(agent, "1050")
    assert second.pending_payload["history"] == {"refunds": 1, "total_cents": 699, "recent": 1}
    client.force_login(admin_user)
    page = client.get(reverse("ops:customer", args=["ana@example.com"])).content.decode()
    assert "$6.99 on order 1042" in page and date.today().isoformat() in page
