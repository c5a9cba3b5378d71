"""Two people at once on one review: a claim race and a decision race between two clients
(threads, each with its own database connection, released together), and a double-click on
Approve. Exactly one wins; the other is told why in words; never a 500."""

from __future__ import annotations

import threading

import pytest
from django.db import connection
from django.test import Client
from django.urls import reverse

from refunds.models import AuditEvent, Decision, Ticket
from tests.conftest import make_order
from tests.reviewing import awaiting_review

HTMX = {"HX-Request": "true", "HX-Target": "queue-rows"}
ROUNDS = 4


def at_once(*calls):
    """Run each call in its own thread, released by one barrier; return their results."""
    barrier = threading.Barrier(len(calls))
    results: list = [None] * len(calls)

    def run(i, call):
        try:
            barrier.wait()
            results[i] = call()
        finally:
            connection.close()

    threads = [threading.Thread(target=run, args=(i, c)) for i, c in enumerate(calls)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(30)
    return results


def logged_in(user) -> Client:
    client = Client()
    client.force_login(user)
    return client


@pytest.fixture
def reviewers(transactional_db, agent, colleague):
    return logged_in(agent), logged_in(colleague)


def test_two_reviewers_claiming_at_once_one_wins_the_other_is_told_who(reviewers, agent, colleague):
    a, b = reviewers
    for n in range(ROUNDS):
        ticket = awaiting_review(make_order(f"61{n}"))
        url = reverse("reviews:claim", args=[ticket.pk])
        responses = at_once(
            lambda url=url: a.post(url, {"claim": "1"}, headers=HTMX),
            lambda url=url: b.post(url, {"claim": "1"}, headers=HTMX),
        )
        codes = sorted(r.status_code for r in responses)
        assert codes == [200, 409], codes
        winner = Ticket.objects.get(pk=ticket.pk).claimed_by
        loser = responses[[r.status_code for r in responses].index(409)].content.decode()
        assert f"Already taken: {winner.username} is looking at the review" in loser
        assert AuditEvent.objects.filter(ticket=ticket, action="claim").count() == 1


def test_two_reviewers_deciding_at_once_one_decision_is_recorded_the_other_told(reviewers):
    a, b = reviewers
    for n in range(ROUNDS):
        ticket = awaiting_review(make_order(f"62{n}"))
        url = reverse("reviews:decide", args=[ticket.pk])
        form = {"interrupt_id": ticket.pending_interrupt_id}
        responses = at_once(
            lambda url=url, form=form: a.post(url, form | {"approve": "1"}, headers=HTMX),
            lambda url=url, form=form: b.post(
                url, form | {"reject": "1", "reason": "no"}, headers=HTMX
            ),
        )
        codes = sorted(r.status_code for r in responses)
        assert codes == [200, 409], codes
        loser = responses[[r.status_code for r in responses].index(409)].content.decode()
        assert "Already decided" in loser or "Already taken" in loser
        assert Decision.objects.filter(ticket=ticket).count() == 1


def test_a_claim_keeps_a_colleague_from_deciding_until_it_is_released(
    client, agent, colleague, late_order
):
    ticket = awaiting_review(late_order)
    client.force_login(agent)
    client.post(reverse("reviews:claim", args=[ticket.pk]), {"claim": "1"})
    client.force_login(colleague)
    html = client.get("/").content.decode()
    assert "Being looked at by <strong>agent</strong>" in html
    form = {"interrupt_id": ticket.pending_interrupt_id, "approve": "1"}
    response = client.post(reverse("reviews:decide", args=[ticket.pk]), form, headers=HTMX)
    assert response.status_code == 409
    assert (
        "Already taken: agent is looking at the review of order 1042" in response.content.decode()
    )
    assert not Decision.objects.exists()

    client.force_login(agent)
    client.post(reverse("reviews:claim", args=[ticket.pk]), {"unclaim": "1"})
    client.force_login(colleague)
    assert client.post(reverse("reviews:decide", args=[ticket.pk]), form).status_code == 302
    assert [e.action for e in AuditEvent.objects.filter(ticket=ticket)] == [
        "claim",
        "unclaim",
        "approve",
    ]


def test_a_claim_lapses_after_the_configured_time(client, agent, colleague, late_order, settings):
    import time_machine

    settings.REFUNDS_CLAIM_SECONDS = 60
    ticket = awaiting_review(late_order)
    with time_machine.travel(0, tick=False) as clock:
        clock.move_to(ticket.review_since)
        client.force_login(agent)
        client.post(reverse("reviews:claim", args=[ticket.pk]), {"claim": "1"})
        client.force_login(colleague)
        url = reverse("reviews:claim", args=[ticket.pk])
        assert client.post(url, {"claim": "1"}, headers=HTMX).status_code == 409
        clock.shift(61)
        assert client.post(url, {"claim": "1"}, headers=HTMX).status_code == 200
    assert Ticket.objects.get(pk=ticket.pk).claimed_by == colleague


def test_a_double_click_on_approve_answers_200_then_already_decided(client, agent, late_order):
    ticket = awaiting_review(late_order)
    client.force_login(agent)
    url = reverse("reviews:decide", args=[ticket.pk])
    form = {"interrupt_id": ticket.pending_interrupt_id, "approve": "1"}
    first = client.post(url, form, headers=HTMX)
    assert first.status_code == 200
    # Meanwhile a worker took the decision: the row's payload is cleared (the 500 was here).
    Ticket.objects.filter(pk=ticket.pk).update(
        status=Ticket.Status.RUNNING, pending_interrupt_id="", pending_payload=None
    )
    second = client.post(url, form, headers=HTMX)
    assert second.status_code == 409
    assert "Already decided: agent approved this refund" in second.content.decode()
    third = client.post(url, form)  # without JavaScript
    assert third.status_code == 302
    assert "Already decided" in client.get(third["Location"]).content.decode()
    assert Decision.objects.count() == 1


def test_approve_and_reject_together_are_refused(client, agent, late_order):
    ticket = awaiting_review(late_order)
    client.force_login(agent)
    form = {
        "interrupt_id": ticket.pending_interrupt_id,
        "approve": "1",
        "reject": "1",
        "reason": "x",
    }
    response = client.post(reverse("reviews:decide", args=[ticket.pk]), form, headers=HTMX)
    assert response.status_code == 400
    assert "Choose either approve or reject, not both." in response.content.decode()
    assert not Decision.objects.exists()
