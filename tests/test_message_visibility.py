"""Who reads a customer's message (`/messages/<id>/`, and the sorting form's answers, which show
it): whoever may see its ticket (refunds.permissions.visible), anyone at the desk while it needs
sorting, who brought it in while it is not placed; managers and admins read every one; a user
in no desk group none (403). One rule: intake.selectors.messages_visible."""

from __future__ import annotations

import uuid

import pytest
from django.contrib.auth.models import User
from django.urls import reverse
from django.utils import timezone

from intake.models import Message, MessageEvent
from refunds import policy
from refunds.models import Role, Ticket
from tests.conftest import make_order
from tests.reviewing import awaiting_review

SEEN, HIDDEN, REFUSED = 200, 404, 403
# The message's state: its status, whose message it is, the ticket it is on.
STATES = [
    "emailed_being_read",
    "pasted_by_agent_being_read",
    "needs_sorting",
    "not_refund",
    "on_agents_ticket",
    "on_managers_ticket",
    "pasted_by_agent_added_to_managers_ticket",
    "sent_back_from_managers_ticket",
]
AGENT_SEES = {
    "pasted_by_agent_being_read",
    "needs_sorting",
    "on_agents_ticket",
    "sent_back_from_managers_ticket",
}
COLLEAGUE_SEES = AGENT_SEES - {"pasted_by_agent_being_read"}
TABLE = (
    [("agent", s, SEEN if s in AGENT_SEES else HIDDEN) for s in STATES]
    + [("colleague", s, SEEN if s in COLLEAGUE_SEES else HIDDEN) for s in STATES]
    + [("manager", s, SEEN) for s in STATES]
    + [("admin_user", s, SEEN) for s in STATES]
    + [("nobody", s, REFUSED) for s in STATES]
)


@pytest.fixture
def nobody(db) -> User:
    return User.objects.create_user("nobody", password="pw")  # in no desk group


def a_message(state: str, agent: User) -> Message:
    """A message in `state`, built straight in the database as the intake and the desk leave it."""
    pasted = "pasted_by_agent" in state
    status = {
        "needs_sorting": Message.Status.NEEDS_SORTING,
        "not_refund": Message.Status.NOT_REFUND,
        "sent_back_from_managers_ticket": Message.Status.NEEDS_SORTING,
        "on_agents_ticket": Message.Status.OPENED,
        "on_managers_ticket": Message.Status.OPENED,
        "pasted_by_agent_added_to_managers_ticket": Message.Status.ADDED,
    }.get(state, Message.Status.RECEIVED)
    ticket = None
    if "agents_ticket" in state:
        ticket = awaiting_review(make_order("5001", fee_cents=699))
    elif "managers_ticket" in state:
        ticket = awaiting_review(make_order("5002", fee_cents=4800))
        assert ticket.required_role == Role.MANAGER
    key = uuid.uuid4().hex
    return Message.objects.create(
        key=f"x:{key}",
        channel=Message.Channel.DESK if pasted else Message.Channel.EMAIL,
        brought_by=agent if pasted else None,
        sender="ana@example.com",
        body="Hi, the private words of Ana, phone 555-0100: my order came late.",
        received_at=timezone.now(),
        thread_id=f"intake-{key}",
        status=status,
        sorting_reason="no order found" if status == Message.Status.NEEDS_SORTING else "",
        ticket=ticket,
    )


@pytest.mark.parametrize(("persona", "state", "expected"), TABLE)
def test_a_message_is_read_by_exactly_who_may_see_it(
    request, client, agent, colleague, manager, admin_user, nobody, persona, state, expected
):
    message = a_message(state, agent)
    client.force_login(request.getfixturevalue(persona))
    response = client.get(reverse("reviews:message", args=[message.pk]))
    assert response.status_code == expected
    assert ("555-0100" in response.content.decode()) == (expected == SEEN)
    polled = client.get(reverse("reviews:message", args=[message.pk]), headers={"HX-Request": "1"})
    assert polled.status_code in ((200, 286) if expected == SEEN else (expected,))


@pytest.mark.parametrize("state", ["on_managers_ticket", "not_refund", "emailed_being_read"])
def test_sorting_a_message_the_agent_may_not_see_is_a_404_and_changes_nothing(client, agent, state):
    message = a_message(state, agent)
    client.force_login(agent)
    response = client.post(
        reverse("reviews:message_sort", args=[message.pk]),
        {"order": ["5002"], "reason": policy.LATE_DELIVERY, "open": "1"},
        headers={"HX-Request": "true"},
    )
    assert response.status_code == HIDDEN and "555-0100" not in response.content.decode()
    fresh = Message.objects.get(pk=message.pk)
    assert (fresh.status, fresh.ticket_id) == (message.status, message.ticket_id)
    assert not MessageEvent.objects.exists() and Ticket.objects.count() == int(
        message.ticket_id is not None
    )
