"""Who may see and decide what (refunds/permissions.py), the same on the pages and in the API."""

from __future__ import annotations

import pytest
from django.contrib.auth.models import User

from api.models import ApiToken
from refunds import permissions
from refunds.models import Ticket
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


@pytest.mark.parametrize("persona", ["agent", "manager", "admin_user", "nobody"])
@pytest.mark.parametrize("scheme", ["Bearer", "Token"])
def test_the_api_list_holds_exactly_what_the_pages_show(request, client, tickets, persona, scheme):
    user = request.getfixturevalue(persona)
    client.force_login(user)
    api = {"HTTP_AUTHORIZATION": f"{scheme} {ApiToken.issue(user)[1]}"}
    listed = {t["id"] for t in client.get("/api/tickets/", **api).json()["results"]}
    shown = {t.pk for t in tickets.values() if client.get(f"/tickets/{t.pk}/").status_code == 200}
    assert listed == shown == {t.pk for t in permissions.visible(user)}


def test_a_token_acts_with_its_users_rights_not_the_sessions(client, agent, admin_user, tickets):
    client.force_login(admin_user)  # an admin's browser, sending an agent's key
    api = {"HTTP_AUTHORIZATION": f"Bearer {ApiToken.issue(agent)[1]}"}
    assert client.get(f"/api/tickets/{tickets['big'].pk}/", **api).status_code == 404
    assert client.get(f"/tickets/{tickets['big'].pk}/").status_code == 200  # the session's own


@pytest.mark.parametrize(
    ("persona", "dashboard", "metrics"),
    [("agent", 403, 401), ("manager", 200, 401), ("admin_user", 200, 200), ("nobody", 403, 401)],
)
def test_who_reads_the_dashboard_and_the_metrics(request, client, db, persona, dashboard, metrics):
    client.force_login(request.getfixturevalue(persona))
    assert client.get("/dashboard/").status_code == dashboard
    assert client.get("/metrics").status_code == metrics


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
