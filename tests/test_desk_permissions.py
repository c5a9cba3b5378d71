"""The desk's permission matrix, role by action, on the pages and in the API: who may view,
claim, decide, lower an amount, escalate, bulk approve, read and export the audit trail. Every
refusal leaves the ticket as it was."""

from __future__ import annotations

import pytest
from django.contrib.auth.models import User
from django.urls import reverse

from api.models import ApiToken
from refunds.models import AuditEvent, CustomerQuestion, Decision, Email, Ticket
from tests.conftest import make_order
from tests.reviewing import awaiting_review

ALLOWED, REFUSED, HIDDEN = "allowed", "refused", "hidden"
PERSONAS = ["agent", "manager", "admin_user", "nobody"]


@pytest.fixture
def nobody(db) -> User:
    return User.objects.create_user("nobody", password="pw")  # in no desk group


@pytest.fixture
def opener(db) -> User:
    """Whoever opened the tickets under test: a helpdesk integration's user, in no group."""
    return User.objects.create_user("helpdesk", password="pw")


@pytest.fixture
def small(opener) -> Ticket:
    return awaiting_review(make_order("4001", fee_cents=699), opened_by=opener)


@pytest.fixture
def big(opener) -> Ticket:
    return awaiting_review(make_order("4002", fee_cents=4800), opened_by=opener)


def snapshot(ticket: Ticket) -> tuple:
    fresh = Ticket.objects.get(pk=ticket.pk)
    return (
        fresh.status,
        fresh.pending_interrupt_id,
        fresh.claimed_by_id,
        fresh.escalated_for,
        fresh.decisions.count(),
        AuditEvent.objects.filter(ticket=ticket).count(),
    )


def outcome(response) -> str:
    if response.status_code == 404:
        return HIDDEN
    if response.status_code == 403:
        return REFUSED
    assert response.status_code in (200, 302), (response.status_code, response.content[:300])
    return ALLOWED


def act(client, action: str, ticket: Ticket):
    url = {
        "claim": reverse("reviews:claim", args=[ticket.pk]),
        "decide": reverse("reviews:decide", args=[ticket.pk]),
    }
    form = {"interrupt_id": ticket.pending_interrupt_id}
    if action == "view":
        return client.get(reverse("reviews:ticket", args=[ticket.pk]))
    if action == "claim":
        return client.post(url["claim"], {"claim": "1"})
    if action == "decide":
        return client.post(url["decide"], form | {"approve": "1"})
    if action == "edit":
        return client.post(url["decide"], form | {"approve": "1", "amount": "3.00"})
    if action == "escalate":
        return client.post(url["decide"], form | {"escalate": "1", "note": "odd one"})
    raise AssertionError(action)


# (action, review) -> what agent, manager, admin and a user in no group get, for the agent-level
# review ($6.99) and the manager-level one ($48.00). Y allowed, N refused (403), H hidden (404).
CODES = {"Y": ALLOWED, "N": REFUSED, "H": HIDDEN}
TABLE = {
    ("view", "small"): "YYYH",
    ("view", "big"): "HYYH",
    ("claim", "small"): "YYYH",  # managers cover the agents' reviews
    ("claim", "big"): "HYYH",
    ("decide", "small"): "YYYH",
    ("decide", "big"): "HYYH",
    ("edit", "small"): "NYYH",  # only managers (and admins) lower an amount
    ("edit", "big"): "HYYH",
    ("escalate", "small"): "YNYH",  # agents send up; a manager decides instead
    ("escalate", "big"): "HNNH",  # already with managers
}
MATRIX = {
    key: {persona: CODES[code] for persona, code in zip(PERSONAS, codes, strict=True)}
    for key, codes in TABLE.items()
}


@pytest.mark.parametrize("persona", PERSONAS)
@pytest.mark.parametrize(("action", "which"), list(MATRIX))
def test_each_role_may_do_what_the_matrix_says_and_a_refusal_changes_nothing(
    request, client, small, big, persona, action, which
):
    user = request.getfixturevalue(persona)
    ticket = {"small": small, "big": big}[which]
    client.force_login(user)
    before = snapshot(ticket)
    got = outcome(act(client, action, ticket))
    assert got == MATRIX[(action, which)][persona], (persona, action, which)
    if got != ALLOWED or action == "view":
        assert snapshot(ticket) == before
    elif action in ("decide", "edit"):
        decision = Decision.objects.get(ticket=ticket)
        assert decision.reviewer == user
        if action == "edit":
            assert [o["amount_cents"] for o in decision.orders.values()] == [300]
    elif action == "claim":
        assert Ticket.objects.get(pk=ticket.pk).claimed_by == user
    elif action == "escalate":
        fresh = Ticket.objects.get(pk=ticket.pk)
        assert fresh.is_escalated and fresh.escalation_note == "odd one"


@pytest.mark.parametrize(
    ("persona", "expected"),
    [("agent", 403), ("manager", 200), ("admin_user", 200), ("nobody", 403)],
)
def test_the_audit_page_and_its_export_are_for_managers_and_admins(
    request, client, small, persona, expected
):
    client.force_login(request.getfixturevalue(persona))
    assert client.get(reverse("reviews:audit")).status_code == expected
    assert client.get(reverse("reviews:audit_export")).status_code == expected


@pytest.mark.parametrize(
    ("persona", "approved"),
    [("agent", {"small"}), ("manager", {"small", "big"}), ("admin_user", {"small", "big"}),
     ("nobody", set())],
)  # fmt: skip
def test_bulk_approve_decides_only_what_the_role_may(
    request, client, small, big, persona, approved
):
    client.force_login(request.getfixturevalue(persona))
    picks = [f"{t.pk}:{t.pending_interrupt_id}" for t in (small, big)]
    response = client.post(reverse("reviews:bulk_approve"), {"pick": picks}, follow=True)
    assert response.status_code == 200
    decided = {name for name, t in (("small", small), ("big", big)) if t.decisions.exists()}
    assert decided == approved


@pytest.mark.parametrize("persona", ["agent", "manager", "admin_user"])
def test_nobody_decides_a_ticket_they_opened_on_the_page_or_in_the_api(
    db, request, client, persona
):
    """Four-eyes, for every role, admins included."""
    user = request.getfixturevalue(persona)
    mine = awaiting_review(make_order("4003", fee_cents=699), opened_by=user)
    client.force_login(user)
    form = {"interrupt_id": mine.pending_interrupt_id, "approve": "1"}
    response = client.post(reverse("reviews:decide", args=[mine.pk]), form)
    assert response.status_code == 403
    assert "four-eyes" in response.content.decode()
    api = {"HTTP_AUTHORIZATION": f"Bearer {ApiToken.issue(user)[1]}"}
    response = client.post(
        f"/api/tickets/{mine.pk}/decision/",
        {"interrupt_id": mine.pending_interrupt_id, "answer": "approve"},
        content_type="application/json",
        **api,
    )
    assert response.status_code == 403 and "four-eyes" in response.json()["error"]
    assert not Decision.objects.exists()
    assert mine not in {t for t in (client.get("/").context["reviews"])}  # not in their queue


@pytest.mark.parametrize("persona", ["agent", "manager", "admin_user"])
def test_nobody_asks_the_customer_on_a_ticket_they_opened_on_the_page_or_in_the_api(
    db, request, client, mailoutbox, persona
):
    """Four-eyes on the ask path too: a question is a reviewer's answer to the review (it holds
    the refund and writes to the customer), so the opener may not give it. The view and the API
    call the service with no early check of their own: this is the service's refusal."""
    user = request.getfixturevalue(persona)
    mine = awaiting_review(make_order("4004", fee_cents=699), opened_by=user)
    before = snapshot(mine)
    client.force_login(user)
    form = {"interrupt_id": mine.pending_interrupt_id, "ask": "1", "question": "A photo?"}
    response = client.post(reverse("reviews:decide", args=[mine.pk]), form)
    assert response.status_code == 403
    assert "four-eyes" in response.content.decode()
    api = {"HTTP_AUTHORIZATION": f"Bearer {ApiToken.issue(user)[1]}"}
    response = client.post(
        f"/api/tickets/{mine.pk}/decision/",
        {"interrupt_id": mine.pending_interrupt_id, "answer": "ask", "reason": "A photo?"},
        content_type="application/json",
        **api,
    )
    assert response.status_code == 403 and "four-eyes" in response.json()["error"]
    assert snapshot(mine) == before
    assert not CustomerQuestion.objects.exists() and not Email.objects.exists()
    assert mailoutbox == []


def test_a_forged_agent_decision_on_a_managers_review_is_refused_and_changes_nothing(
    client, agent, big_order
):
    # The agent opened it, so they can read it and forge a POST with its interrupt id.
    big = awaiting_review(big_order, opened_by=agent)
    before = snapshot(big)
    client.force_login(agent)
    for form in (
        {"interrupt_id": big.pending_interrupt_id, "approve": "1"},
        {"interrupt_id": big.pending_interrupt_id, "approve": "1", "amount": "1.00"},
        {"interrupt_id": big.pending_interrupt_id, "reject": "1", "reason": "x"},
    ):
        response = client.post(reverse("reviews:decide", args=[big.pk]), form)
        assert response.status_code == 403
        assert "decided by a manager" in response.content.decode()
    api = {"HTTP_AUTHORIZATION": f"Bearer {ApiToken.issue(agent)[1]}"}
    response = client.post(
        f"/api/tickets/{big.pk}/decision/",
        {"interrupt_id": big.pending_interrupt_id, "answer": "approve"},
        content_type="application/json",
        **api,
    )
    assert response.status_code == 403
    assert snapshot(big) == before


def test_a_plain_form_403_is_a_page_with_words(client, agent, big_order):
    big = awaiting_review(big_order, opened_by=agent)
    client.force_login(agent)
    response = client.post(
        reverse("reviews:decide", args=[big.pk]),
        {"interrupt_id": big.pending_interrupt_id, "approve": "1"},
    )
    html = response.content.decode()
    assert response.status_code == 403
    assert "<title>Not allowed · Refund Desk</title>" in html
    assert "This refund is decided by a manager" in html and "Nothing was changed" in html


def test_managers_cover_the_agents_queue_when_they_ask(client, manager, small, big):
    client.force_login(manager)
    assert {t.pk for t in client.get("/").context["reviews"]} == {big.pk}
    assert {t.pk for t in client.get("/?cover=1").context["reviews"]} == {small.pk, big.pk}


def test_an_escalated_review_leaves_the_agents_queue_for_the_managers(
    client, agent, manager, small
):
    client.force_login(agent)
    form = {"interrupt_id": small.pending_interrupt_id, "escalate": "1", "note": "regular"}
    client.post(reverse("reviews:decide", args=[small.pk]), form)
    assert list(client.get("/").context["reviews"]) == []
    html = client.get(reverse("reviews:ticket", args=[small.pk])).content.decode()
    assert "Escalated to managers" in html and "regular" in html
    assert "escalated to managers; a manager decides it" in html
    client.force_login(manager)
    assert [t.pk for t in client.get("/").context["reviews"]] == [small.pk]
    event = AuditEvent.objects.get(ticket=small, action="escalate")
    assert (event.actor, event.note) == (agent, "regular")


def test_an_escalation_needs_a_note(client, agent, small):
    client.force_login(agent)
    form = {"interrupt_id": small.pending_interrupt_id, "escalate": "1"}
    response = client.post(reverse("reviews:decide", args=[small.pk]), form, follow=True)
    assert "Say why you escalate it" in response.content.decode()
    assert not Ticket.objects.get(pk=small.pk).is_escalated
