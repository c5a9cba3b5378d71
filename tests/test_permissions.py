"""Who may see and decide what (refunds/permissions.py), the same on the pages and in the API."""

from __future__ import annotations

import pytest
from django.contrib.auth.models import User

from refunds import permissions
from refunds.models import ApiToken, Ticket
from tests.conftest import make_order
from tests.reviewing import awaiting_review


@pytest.fixture
def nobody(db) -> User:
    return User.objects.create_user("nobody", password="pw")  # in no desk group


@pytest.fixture
def tickets(db, agent):
    small = awaiting_review(make_order("3001", fee_cents=699))  # an agent's review
    big = awaiting_review(make_order("3002", fee_cents=4800))  # a manager's review
    mine = awaiting_review(make_order("3003", fee_cents=9900), opened_by=agent)  # a manager's
    return {"small": small, "big": big, "mine": mine}


@pytest.mark.parametrize(
    ("persona", "sees"),
    [
        ("agent", {"small", "mine"}),  # an agent's scope, and what they opened
        ("manager", {"small", "big", "mine"}),
        ("admin_user", {"small", "big", "mine"}),
        ("nobody", set()),
    ],
)
def test_each_role_reads_its_scope_on_the_page_and_in_the_api(
    request, client, tickets, persona, sees
):
    user = request.getfixturevalue(persona)
    by_id = {t.pk: name for name, t in tickets.items()}
    assert {by_id[t.pk] for t in permissions.visible(user)} == sees
    client.force_login(user)
    api = {"HTTP_AUTHORIZATION": f"Token {ApiToken.issue(user)[1]}"}
    for name, ticket in tickets.items():
        page = client.get(f"/tickets/{ticket.pk}/")
        body = client.get(f"/api/tickets/{ticket.pk}/", **api)
        expected = 200 if name in sees else 404
        assert (page.status_code, body.status_code) == (expected, expected), (persona, name)


def test_an_agent_cannot_decide_a_managers_review_and_is_told_who_does(agent, tickets):
    refusal = permissions.decision_refusal(agent, tickets["big"])
    assert (
        refusal == "This refund is decided by a manager (it is over $20.00 or flagged by policy)."
    )
    assert permissions.decision_refusal(agent, tickets["small"]) == ""


def test_a_user_in_no_group_decides_nothing(nobody, tickets):
    assert list(permissions.reviewable(nobody)) == []
    assert all(permissions.decision_refusal(nobody, t) for t in tickets.values())


def test_a_ticket_that_is_not_waiting_cannot_be_decided(agent, late_order):
    ticket = Ticket.objects.create(thread_id="t", order=late_order, status="refunded")
    assert "not waiting on a review" in permissions.decision_refusal(agent, ticket)
