"""An approval can be undone for a few seconds (issue 31 item 11): a decision is recorded at
once with the end of its grace (REFUNDS_UNDO_SECONDS); no worker applies it before, and Undo
withdraws it meanwhile (the review comes back to the queue). After the grace Undo is refused.
The late guard is the runner's compare-and-set as it takes the decision, raced here against an
Undo in another connection. The graph runs in this process (runner.advance), as a worker's."""

from __future__ import annotations

import threading
import time
from datetime import timedelta
from zoneinfo import ZoneInfo

import pytest
from django.db import connection, transaction
from django.db.models import F
from django.db.models.functions import Now
from django.urls import reverse
from django.utils import timezone

from core.clock import day_words
from refunds import enqueue, runner, services
from refunds import lease as leases
from refunds.models import AuditEvent, Charge, Decision, Ticket
from tests.reviewing import advance_to_review, decide

BOUND = 10.0  # seconds a wait may take before the test fails


@pytest.fixture(autouse=True)
def grace(settings, monkeypatch):
    settings.REFUNDS_UNDO_SECONDS = 5
    woken: list[tuple[int, float]] = []
    monkeypatch.setattr(enqueue, "wake", lambda ticket_id: woken.append((ticket_id, 0)) or True)
    monkeypatch.setattr(
        enqueue, "wake_after", lambda ticket_id, s: woken.append((ticket_id, s)) or True
    )
    return woken


@pytest.fixture
def review(transactional_db, late_order) -> Ticket:
    return advance_to_review(services.ticket_open(order_number="1042"))


def grace_over(decision: Decision) -> None:
    """As if the grace had passed (the database's clock decides it)."""
    Decision.objects.filter(pk=decision.pk).update(apply_after=Now() - timedelta(seconds=1))


def test_a_decision_waits_out_its_grace_and_undo_brings_the_review_back(
    review, agent, colleague, grace
):
    decision = decide(review, agent)
    assert decision.apply_after is not None
    assert decision.apply_after - decision.decided_at >= timedelta(seconds=4.9)
    assert grace[-1] == (review.pk, 5.5)  # woken just after the grace, not at once
    # A worker woken early applies nothing: the review still waits, no money moved.
    assert runner.advance(review.pk) == "awaiting_review"
    assert not Charge.objects.exists() and Decision.objects.get().applied_at is None
    assert not Ticket.objects.needing_worker().filter(pk=review.pk).exists()

    services.decision_undo(decision_id=decision.pk, by=agent)
    assert not Decision.objects.exists()
    undo = AuditEvent.objects.get(ticket=review, action="undo")
    assert undo.actor == agent and undo.answer["answer"] == "approve"
    # Back in the queue: anyone (here a colleague) answers it afresh.
    again = decide(Ticket.objects.get(pk=review.pk), colleague, "reject", "On time after all.")
    grace_over(again)
    assert runner.advance(review.pk) == "rejected"


def test_after_the_grace_undo_is_refused_and_the_decision_is_applied(review, agent):
    decision = decide(review, agent)
    grace_over(decision)
    with pytest.raises(services.RefundError, match="Too late to undo: the decision on order 1042"):
        services.decision_undo(decision_id=decision.pk, by=agent)
    assert runner.advance(review.pk) == "refunded"
    assert Charge.objects.get().amount_cents == 699


def test_only_who_decided_undoes(review, agent, colleague):
    decision = decide(review, agent)
    with pytest.raises(services.RefundError, match="no decision of yours"):
        services.decision_undo(decision_id=decision.pk, by=colleague)
    assert Decision.objects.filter(pk=decision.pk).exists()


def test_the_sweep_finds_a_decision_whose_grace_ended_with_no_worker_up(review, agent):
    decision = decide(review, agent)
    assert not Ticket.objects.needing_worker().filter(pk=review.pk).exists()
    grace_over(decision)  # the wake-up was lost with the worker; the grace ended
    assert Ticket.objects.needing_worker().filter(pk=review.pk).exists()
    assert runner.advance(review.pk) == "refunded"


def test_a_grace_of_zero_applies_at_once(review, agent, settings, grace):
    settings.REFUNDS_UNDO_SECONDS = 0
    decision = decide(review, agent)
    assert decision.apply_after is None and grace[-1] == (review.pk, 0)
    with pytest.raises(services.RefundError, match="Too late to undo"):
        services.decision_undo(decision_id=decision.pk, by=agent)
    assert runner.advance(review.pk) == "refunded"


def test_an_undo_holding_the_row_as_the_grace_ends_beats_the_apply(review, agent):
    """The race where it happens: Undo's DELETE went through inside the grace and has not
    committed yet when the grace ends and the runner takes the decision. The runner's
    compare-and-set waits for the row, finds it gone, and applies nothing."""
    decision = decide(review, agent)
    Decision.objects.filter(pk=decision.pk).update(
        apply_after=timezone.now() + timedelta(seconds=1)
    )
    deleted, release = threading.Event(), threading.Event()
    outcome: list[int] = []

    def undo():
        try:
            with transaction.atomic():
                won, _ = Decision.objects.filter(pk=decision.pk, apply_after__gt=Now()).delete()
                outcome.append(won)
                deleted.set()
                release.wait(BOUND)
        finally:
            connection.close()

    thread = threading.Thread(target=undo)
    thread.start()
    assert deleted.wait(BOUND) and outcome == [1]
    deadline = time.monotonic() + BOUND
    while timezone.now() <= decision.decided_at + timedelta(seconds=1.2):  # the grace ends
        assert time.monotonic() < deadline
        time.sleep(0.05)
    threading.Timer(0.3, release.set).start()  # Undo commits while the runner waits on it
    taken = runner._taken(Decision.objects.filter(pk=decision.pk))
    thread.join(BOUND)
    assert taken is False
    assert runner.advance(review.pk) == "awaiting_review" and not Charge.objects.exists()


def test_a_worker_that_read_the_decision_inside_its_grace_takes_nothing_and_undo_wins(
    review, agent
):
    """The undo window is held in one place, where the decision is taken: a worker woken inside
    the grace (a wake-up of its own, a sweep, another decision's) holds the lease and has read
    the decision with it. Its compare-and-set refuses the decision and leaves the grace as it
    was, so the reviewer's Undo still wins; then, with the worker's read gone stale, it takes
    nothing either."""
    decision = decide(review, agent)
    pending = {review.pending_interrupt_id}
    lease = leases.grant(review.pk)
    assert lease is not None
    assert [row[0] for row in lease.open_decisions or []] == [decision.pk]  # a read, no guard
    try:
        assert runner._settle_decisions(lease, pending, None) is None
    finally:
        lease.release()
    assert Decision.objects.get(pk=decision.pk).apply_after == decision.apply_after
    assert not Charge.objects.exists()

    stale = leases.grant(review.pk)  # reads it again, inside the grace
    assert stale is not None
    services.decision_undo(decision_id=decision.pk, by=agent)  # the reviewer's Undo wins
    try:
        assert runner._settle_decisions(stale, pending, None) is None
    finally:
        stale.release()
    assert not Decision.objects.exists()
    assert runner.advance(review.pk) == "awaiting_review" and not Charge.objects.exists()


def test_a_worker_whose_epoch_was_taken_over_takes_no_decision_and_marks_none(review, agent):
    """The decision's compare-and-set is fenced by the lease's epoch: a worker paused past its
    lease, whose thread another worker holds now, neither takes a decision past its grace (the
    other worker applies it) nor marks one refused or applied."""
    decision = decide(review, agent)
    grace_over(decision)
    before = Decision.objects.get(pk=decision.pk)
    pending = {review.pending_interrupt_id}
    stale = leases.grant(review.pk)
    assert stale is not None
    Ticket.objects.filter(pk=review.pk).update(lease_epoch=F("lease_epoch") + 1)  # taken over
    assert runner._settle_decisions(stale, pending, None) is None
    assert runner._settle_decisions(stale, set(), decision.pk) is None  # "the resume landed"
    assert runner._settle_decisions(stale, {"another-review"}, None) is None  # "not waited on"
    after = Decision.objects.get(pk=decision.pk)
    assert after.apply_after == before.apply_after  # still there to take, by the new epoch
    assert (after.applied_at, after.refused_reason) == (None, "")


def test_an_apply_that_took_the_decision_first_refuses_the_undo(review, agent):
    decision = decide(review, agent)
    grace_over(decision)
    assert runner._taken(Decision.objects.filter(pk=decision.pk)) is True
    # Even were the clocks to disagree: the taken decision has no grace left to undo in.
    assert Decision.objects.get(pk=decision.pk).apply_after is None
    with pytest.raises(services.RefundError, match="Too late"):
        services.decision_undo(decision_id=decision.pk, by=agent)


def test_undo_beside_the_queues_confirmation(client, review, agent):
    client.force_login(agent)
    headers = {"HX-Request": "true", "HX-Target": f"review-{review.pk}"}
    response = client.post(
        reverse("reviews:decide", args=[review.pk]),
        {"interrupt_id": review.pending_interrupt_id, "approve": "1"},
        headers=headers,
    )
    html = response.content.decode()
    decision = Decision.objects.get()
    assert f'action="{reverse("reviews:undo", args=[decision.pk])}"' in html and "Undo" in html
    # Nothing is paid yet: the confirmation says when it will be, not that it is under way.
    assert "for order 1042 — paid out in 5 seconds unless you undo it" in html
    assert "being paid out" not in html
    page = client.post(reverse("reviews:undo", args=[decision.pk]), follow=True).content.decode()
    assert "Undone: the review of order 1042 is back in the queue." in page
    assert not Decision.objects.exists()
    assert f'id="review-{review.pk}"' in client.get(reverse("reviews:queue")).content.decode()
    refused = client.post(reverse("reviews:undo", args=[decision.pk]), follow=True)
    assert "There is no decision of yours to undo here." in refused.content.decode()


def test_the_ticket_page_gives_the_undo_deadline_to_the_second_in_the_reviewers_zone(
    client, review, agent
):
    decision = decide(review, agent)
    assert decision.apply_after is not None
    client.force_login(agent)
    client.cookies["tz"] = "Asia/Tokyo"  # what desk.js sets from the reviewer's browser

    html = client.get(reverse("reviews:ticket", args=[review.pk])).content.decode()

    there = decision.apply_after.astimezone(ZoneInfo("Asia/Tokyo"))
    said = f"{day_words(there.date())}, {there:%H:%M:%S} JST"
    instant = decision.apply_after.isoformat(timespec="seconds")
    assert f'it is applied at <time datetime="{instant}">{said}</time> unless you undo' in html


def test_undo_on_the_ticket_page_while_the_grace_runs(client, review, agent, colleague):
    decision = decide(review, agent)
    client.force_login(colleague)  # not theirs: no Undo offered
    url = reverse("reviews:ticket", args=[review.pk])
    assert "unless you undo it" not in client.get(url).content.decode()
    client.force_login(agent)
    html = client.get(url).content.decode()
    assert "it is applied at" in html and "unless you undo it." in html
    page = client.post(reverse("reviews:undo", args=[decision.pk]), {"back": "ticket"}, follow=True)
    assert page.redirect_chain[-1][0] == url
    assert "Undone: the review of order 1042 is back in the queue." in page.content.decode()
    grace_over(decide(Ticket.objects.get(pk=review.pk), agent))
    assert "unless you undo it" not in client.get(url).content.decode()  # the grace is over
