"""Approve and Reject: two named buttons of one form, one view."""

import json

import pytest
from django.urls import reverse

from refunds import services
from refunds.models import Decision, Ticket
from tests import reviewing
from tests.reviewing import awaiting_review

HTMX = {"HX-Request": "true", "HX-Target": "review-1"}


def decide_url(ticket: Ticket) -> str:
    return reverse("reviews:decide", args=[ticket.pk])


def unchanged(ticket: Ticket) -> bool:
    fresh = Ticket.objects.get(pk=ticket.pk)
    return (
        fresh.status == Ticket.Status.AWAITING_REVIEW
        and fresh.pending_interrupt_id == ticket.pending_interrupt_id
        and not fresh.decisions.exists()
    )


@pytest.fixture
def small(late_order) -> Ticket:
    return awaiting_review(late_order)


@pytest.fixture
def big(big_order, agent) -> Ticket:
    # Opened by the agent: they may read it (and see it escalated), not decide it.
    return awaiting_review(big_order, opened_by=agent)


def test_it_rejects_get(client, agent, small):
    client.force_login(agent)
    assert client.get(decide_url(small)).status_code == 405
    assert unchanged(small)


def test_it_redirects_anonymous_users_to_log_in(client, small):
    response = client.post(
        decide_url(small), {"interrupt_id": small.pending_interrupt_id, "approve": "1"}
    )
    assert response.status_code == 302
    assert response["Location"].startswith(reverse("login"))
    assert unchanged(small)


def test_it_answers_404_for_an_unknown_ticket(client, agent):
    client.force_login(agent)
    response = client.post(reverse("reviews:decide", args=[999]), {"approve": "1"})
    assert response.status_code == 404


def test_it_forbids_an_agent_to_decide_a_48_dollar_refund(client, agent, big):
    client.force_login(agent)
    response = client.post(
        decide_url(big), {"interrupt_id": big.pending_interrupt_id, "approve": "1"}
    )
    assert response.status_code == 403
    assert unchanged(big)
    assert not Decision.objects.exists()


def test_it_tells_an_htmx_agent_why_a_48_dollar_refund_is_not_theirs(client, agent, big):
    client.force_login(agent)
    response = client.post(
        decide_url(big), {"interrupt_id": big.pending_interrupt_id, "approve": "1"}, headers=HTMX
    )
    assert response.status_code == 403
    assert "decided by a manager" in response.content.decode()
    assert response["HX-Retarget"] == f"#review-{big.pk}"
    assert 'name="approve"' not in response.content.decode()  # no buttons they may not use
    assert unchanged(big)


def test_it_lets_a_manager_approve_a_48_dollar_refund(client, manager, big):
    client.force_login(manager)
    response = client.post(
        decide_url(big), {"interrupt_id": big.pending_interrupt_id, "approve": "1"}
    )
    assert response.status_code == 302
    assert Decision.objects.get().reviewer == manager


def test_it_records_an_approval_and_redirects_to_the_queue(client, agent, small):
    client.force_login(agent)
    response = client.post(
        decide_url(small),
        {"interrupt_id": small.pending_interrupt_id, "approve": "1", "reason": "  fair  "},
    )
    assert response.status_code == 302
    assert response["Location"] == reverse("reviews:queue")
    decision = Decision.objects.get()
    assert (decision.ticket, decision.reviewer, decision.answer, decision.reason) == (
        small,
        agent,
        "approve",
        "fair",
    )
    assert decision.interrupt_id == small.pending_interrupt_id
    assert decision.applied_at is None  # a worker applies it

    page = client.get(response["Location"])
    assert "for order 1042 — being paid out" in page.content.decode()


def test_it_answers_htmx_with_the_decided_row_and_a_queue_event(client, agent, small):
    client.force_login(agent)
    response = client.post(
        decide_url(small),
        {"interrupt_id": small.pending_interrupt_id, "approve": "1"},
        headers=HTMX,
    )
    assert response.status_code == 200
    assert "queueChanged" in json.loads(response["HX-Trigger"])
    html = response.content.decode()
    assert html.startswith(f'<tr id="review-{small.pk}"')
    # Where the review was: a short line, in view where the reviewer tapped.
    assert "Approved $6.99 for order 1042 — being paid out" in html
    # The message region keeps a trail: the newest on top of the earlier ones.
    assert 'hx-swap-oob="afterbegin"' in html
    assert "for order 1042 — being paid out" in html
    assert Decision.objects.get().answer == "approve"


def test_it_records_a_rejection_with_its_reason(client, agent, small):
    client.force_login(agent)
    response = client.post(
        decide_url(small),
        {"interrupt_id": small.pending_interrupt_id, "reject": "1", "reason": "Delivered on time"},
    )
    assert response.status_code == 302
    decision = Decision.objects.get()
    assert (decision.answer, decision.reason) == ("reject", "Delivered on time")


def test_it_refuses_a_rejection_without_a_reason(client, agent, small):
    client.force_login(agent)
    response = client.post(
        decide_url(small),
        {"interrupt_id": small.pending_interrupt_id, "reject": "1", "reason": "  "},
        headers=HTMX,
    )
    assert response.status_code == 400
    html = response.content.decode()
    assert "Give a reason for rejecting order" in html
    assert 'name="reject"' in html  # the form is back, ready for a second try
    assert unchanged(small)


def test_it_shows_the_missing_reason_on_the_queue_without_javascript(client, agent, small):
    client.force_login(agent)
    response = client.post(
        decide_url(small), {"interrupt_id": small.pending_interrupt_id, "reject": "1"}, follow=True
    )
    assert "Give a reason for rejecting order" in response.content.decode()
    assert unchanged(small)


def test_it_refuses_a_post_that_names_no_button(client, agent, small):
    client.force_login(agent)
    response = client.post(
        decide_url(small), {"interrupt_id": small.pending_interrupt_id}, headers=HTMX
    )
    assert response.status_code == 400
    assert "Choose approve or reject" in response.content.decode()
    assert unchanged(small)


@pytest.mark.parametrize("interrupt_id", ["", "0123456789abcdef", "stale-after-a-fork"])
def test_it_refuses_an_interrupt_that_is_not_pending(client, agent, small, interrupt_id):
    client.force_login(agent)
    response = client.post(
        decide_url(small), {"interrupt_id": interrupt_id, "approve": "1"}, headers=HTMX
    )
    assert response.status_code == 400
    assert "This review is no longer pending" in response.content.decode()
    assert unchanged(small)


def test_it_refuses_a_review_the_ticket_has_moved_past(client, agent, small):
    Ticket.objects.filter(pk=small.pk).update(status=Ticket.Status.RUNNING)
    client.force_login(agent)
    response = client.post(
        decide_url(small),
        {"interrupt_id": small.pending_interrupt_id, "approve": "1"},
        headers=HTMX,
    )
    assert response.status_code == 400
    assert "no longer pending" in response.content.decode()
    assert not Decision.objects.exists()


def test_it_answers_409_to_a_second_decision_on_the_same_interrupt(
    client, agent, admin_user, small
):
    client.force_login(agent)
    form = {"interrupt_id": small.pending_interrupt_id, "approve": "1"}
    assert client.post(decide_url(small), form).status_code == 302

    client.force_login(admin_user)
    response = client.post(
        decide_url(small),
        {"interrupt_id": small.pending_interrupt_id, "reject": "1", "reason": "changed my mind"},
        headers=HTMX,
    )
    assert response.status_code == 409
    html = response.content.decode()
    assert "Already decided: agent approved this refund at" in html
    assert Decision.objects.get().answer == "approve"


def test_it_shows_the_earlier_decision_without_javascript(client, agent, small):
    client.force_login(agent)
    form = {"interrupt_id": small.pending_interrupt_id, "approve": "1"}
    client.post(decide_url(small), form)
    response = client.post(decide_url(small), form, follow=True)
    assert "Already decided: agent approved" in response.content.decode()
    assert Decision.objects.count() == 1


def test_it_puts_a_decision_error_in_the_message_region_too(client, agent, small):
    client.force_login(agent)
    response = client.post(
        decide_url(small), {"interrupt_id": small.pending_interrupt_id, "reject": "1"}, headers=HTMX
    )
    html = response.content.decode()
    # The queue's next poll replaces the row; the message region keeps the error in view.
    assert '<div id="messages" hx-swap-oob="true">' in html
    assert "Give a reason for rejecting order 1042" in html


# --- from the ticket page ----------------------------------------------------------------------
TICKET_PAGE = {"HX-Request": "true", "HX-Target": "ticket-status"}


def test_it_answers_the_ticket_page_with_its_status_region(client, agent, small):
    client.force_login(agent)
    response = client.post(
        decide_url(small),
        {"interrupt_id": small.pending_interrupt_id, "approve": "1", "back": "ticket"},
        headers=TICKET_PAGE,
    )
    assert response.status_code == 200
    html = response.content.decode()
    assert html.startswith('<div id="ticket-status"')
    assert "Approved by <strong>agent</strong>" in html and "being applied" in html
    assert 'name="approve"' not in html  # answered: no second chance to click
    assert "for order 1042 — being paid out" in html  # the flash, out of band


def test_it_shows_an_error_in_the_ticket_page_status_region(client, agent, small):
    client.force_login(agent)
    response = client.post(
        decide_url(small),
        {"interrupt_id": small.pending_interrupt_id, "reject": "1", "back": "ticket"},
        headers=TICKET_PAGE,
    )
    assert response.status_code == 400
    html = response.content.decode()
    assert html.startswith('<div id="ticket-status"')
    assert "Give a reason for rejecting order" in html and 'name="reject"' in html
    assert unchanged(small)


def test_it_sends_a_plain_post_from_the_ticket_page_back_there(client, agent, small):
    client.force_login(agent)
    response = client.post(
        decide_url(small),
        {"interrupt_id": small.pending_interrupt_id, "reject": "1", "back": "ticket"},
        follow=True,
    )
    assert response.redirect_chain[-1][0] == reverse("reviews:ticket", args=[small.pk])
    assert "Give a reason for rejecting order" in response.content.decode()

    response = client.post(
        decide_url(small),
        {"interrupt_id": small.pending_interrupt_id, "approve": "1", "back": "ticket"},
    )
    assert response["Location"] == reverse("reviews:ticket", args=[small.pk])
    assert Decision.objects.get().answer == "approve"


# --- the reviewer who lost a claim race is told how the review ended ----------------------------
def _outcome(client, ticket, seen: str):
    return client.get(
        reverse("reviews:ticket", args=[ticket.pk]),
        {"seen": seen},
        headers={"HX-Request": "true", "HX-Target": f"outcome-{ticket.pk}"},
    )


def test_a_lost_claim_race_banner_follows_the_review(client, agent, colleague, small):
    services.review_claim(ticket=small, by=colleague)
    client.force_login(agent)
    response = client.post(reverse("reviews:claim", args=[small.pk]), {"claim": "1"}, headers=HTMX)
    assert response.status_code == 409
    html = response.content.decode()
    assert f'id="outcome-{small.pk}"' in html and f"?seen={small.pending_interrupt_id}" in html
    # Still in the colleague's hands: nothing to swap, the banner stays.
    assert _outcome(client, small, small.pending_interrupt_id).status_code == 204


def test_the_banner_says_who_decided_and_stops_polling(client, agent, colleague, small):
    services.review_claim(ticket=small, by=colleague)
    reviewing.decide(small, colleague)
    client.force_login(agent)
    response = _outcome(client, small, small.pending_interrupt_id)
    assert response.status_code == 286
    html = response.content.decode()
    assert "Order 1042 was decided by bea at" in html and "approved: $6.99" in html
    assert "flash-error" not in html


def test_the_banner_says_the_review_is_free_again(client, agent, colleague, small):
    services.review_claim(ticket=small, by=colleague)
    services.review_unclaim(ticket=small, by=colleague)
    client.force_login(agent)
    response = _outcome(client, small, small.pending_interrupt_id)
    assert response.status_code == 286
    assert "back in the queue" in response.content.decode()


def test_the_banner_says_the_review_went_to_managers(client, agent, colleague, small):
    services.ticket_escalate(ticket=small, by=colleague, note="disputed")
    client.force_login(agent)
    response = _outcome(client, small, small.pending_interrupt_id)
    assert response.status_code == 286
    assert "escalated to managers" in response.content.decode()


@pytest.mark.parametrize("typed", ["１２", "1e3"])
def test_it_refuses_an_amount_in_full_width_digits_or_an_exponent(client, manager, big, typed):
    client.force_login(manager)
    response = client.post(
        decide_url(big),
        {"interrupt_id": big.pending_interrupt_id, "approve": "1", "amount": typed},
        headers=HTMX,
    )
    assert response.status_code == 400
    assert f"“{typed}” is not an amount in US dollars" in response.content.decode()
    assert unchanged(big) and Ticket.objects.get(pk=big.pk).amount_cents == 4800
