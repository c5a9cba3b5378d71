"""Admins fork a thread from before triage with a corrected amount: audited, under the lease,
and never once money has moved."""

import re

import pytest
from django.urls import reverse

from refunds import enqueue, runner, services
from refunds.models import Charge, Decision, Email, Fork, Ticket
from tests.reviewing import advance_to_review as review
from tests.reviewing import decide


@pytest.fixture(autouse=True)
def no_broker(monkeypatch):
    monkeypatch.setattr(enqueue, "wake", lambda ticket_id: None)  # the tests advance by hand


@pytest.fixture
def rejected(transactional_db, agent, late_order) -> Ticket:
    ticket = review(services.ticket_open(order_number="1042"))
    decide(ticket, agent, "reject", "fee looked wrong")
    assert runner.advance(ticket.pk) == "rejected"
    ticket.refresh_from_db()
    return ticket


def test_a_rejected_ticket_forked_with_a_corrected_amount_is_reviewed_again_and_refunded(
    rejected, admin_user
):
    old_interrupt = rejected.pending_interrupt_id or Decision.objects.get().interrupt_id
    fork = services.ticket_fork(
        ticket=rejected, amount_cents=500, reason="only part of the fee", by=admin_user
    )
    assert Ticket.objects.get(pk=rejected.pk).status == "running"

    ticket = review(rejected)
    fork.refresh_from_db()
    assert fork.applied_at is not None and fork.previous_amount_cents == 699
    assert fork.from_checkpoint_id
    assert ticket.amount_cents == 500 and ticket.required_role == "agent"  # re-triaged
    assert ticket.pending_interrupt_id != old_interrupt
    assert ticket.outcome_reason == ""

    decide(ticket, admin_user)
    assert runner.advance(ticket.pk) == "refunded"
    assert Charge.objects.get().amount_cents == 500
    subjects = sorted(Email.objects.values_list("subject", flat=True))
    assert subjects == ["About your refund request for order 1042", "Your refund for order 1042"]


def test_an_answer_to_the_review_a_fork_replaced_is_refused(
    transactional_db, agent, admin_user, late_order
):
    ticket = review(services.ticket_open(order_number="1042"))
    old = ticket.pending_interrupt_id
    services.ticket_fork(ticket=ticket, amount_cents=500, reason="partial refund", by=admin_user)
    stale = Decision.objects.create(
        ticket=ticket, interrupt_id=old, reviewer=agent, answer="approve"
    )  # recorded just as the fork landed
    ticket = review(ticket)
    stale.refresh_from_db()
    assert stale.applied_at is None and "no longer waits" in stale.refused_reason
    assert ticket.pending_interrupt_id != old and ticket.amount_cents == 500
    with pytest.raises(services.RefundError, match="Already decided|no longer pending"):
        services.ticket_decide(
            ticket=ticket,
            interrupt_id=old,
            reviewer=admin_user,
            orders=services.review_answers(ticket, answer="approve"),
        )
    assert Charge.objects.count() == 0


def test_a_fork_is_refused_once_money_has_moved(transactional_db, agent, admin_user, late_order):
    ticket = review(services.ticket_open(order_number="1042"))
    decide(ticket, agent)
    runner.advance(ticket.pk)
    ticket.refresh_from_db()
    with pytest.raises(services.RefundError, match="Money already moved"):
        services.ticket_fork(ticket=ticket, amount_cents=100, reason="oops", by=admin_user)
    assert Fork.objects.count() == 0 and Ticket.objects.get(pk=ticket.pk).status == "refunded"


@pytest.mark.parametrize(
    ("amount", "reason", "message"),
    [
        (0, "x", "between"),
        (-5, "x", "between"),
        (10**7, "x", "between"),
        (12.5, "x", "whole number"),
        (True, "x", "whole number"),
        (500, "  ", "Say why"),
    ],
)
def test_bad_fork_input_is_refused_and_changes_nothing(
    rejected, admin_user, amount, reason, message
):
    with pytest.raises(services.RefundError, match=message):
        services.ticket_fork(ticket=rejected, amount_cents=amount, reason=reason, by=admin_user)
    assert Fork.objects.count() == 0
    assert Ticket.objects.get(pk=rejected.pk).status == "rejected"


def test_a_fork_asking_for_more_than_the_orders_balance_is_refused(rejected, admin_user):
    with pytest.raises(services.RefundError, match=r"\$6.99 left to refund"):
        services.ticket_fork(ticket=rejected, amount_cents=700, reason="typo", by=admin_user)
    assert Fork.objects.count() == 0 and Ticket.objects.get().status == "rejected"


def test_only_admins_fork(rejected, manager):
    from django.core.exceptions import PermissionDenied

    with pytest.raises(PermissionDenied):
        services.ticket_fork(ticket=rejected, amount_cents=500, reason="x", by=manager)
    assert Fork.objects.count() == 0


def test_the_admins_ticket_page_forks_through_the_ops_page_and_shows_the_audit_entry(
    client, rejected, admin_user
):
    client.force_login(admin_user)
    change = reverse("admin:refunds_ticket_change", args=[rejected.pk])
    link = re.search(r'href="([^"]+/fork/\?checkpoint=[^"]+)"', client.get(change).content.decode())
    assert link, "the admin's ticket page offers no fork"
    url, checkpoint = link[1].split("?checkpoint=")
    assert url == reverse("ops:fork", args=[rejected.pk])
    assert client.get(link[1]).status_code == 200
    form = {"checkpoint": checkpoint, "reason": "fee was $5.50", "apply": "1"}
    bad = client.post(url, form | {"amount": "twelve"})
    assert bad.status_code == 400 and "is not an amount in US dollars" in bad.content.decode()
    assert Fork.objects.count() == 0
    assert client.post(url, form | {"amount": "$5.50"}).status_code == 302
    assert Fork.objects.get().amount_cents == 550
    assert "fee was $5.50" in client.get(change).content.decode()  # the audit entry shows


def test_the_audit_csv_gives_each_row_the_amount_of_its_moment(rejected, admin_user, client):
    """Opened at $6.99, rejected at $6.99, forked to $5.00, approved at $5.00: the ticket's
    amount of today ($5.00) is not written on the rows before the fork."""
    import csv
    import io

    services.ticket_fork(ticket=rejected, amount_cents=500, reason="part of it", by=admin_user)
    decide(review(rejected), admin_user)
    client.force_login(admin_user)
    response = client.get(reverse("reviews:audit_export"))
    rows = list(csv.reader(io.StringIO(b"".join(response.streaming_content).decode())))
    assert [(r[3], r[5]) for r in reversed(rows[1:])] == [  # newest first
        ("Opened", "$6.99"),
        ("Rejected", "$6.99"),
        ("Forked", "$5.00"),
        ("Approved", "$5.00"),
    ]
