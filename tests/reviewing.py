"""Tickets paused on a review, built straight in the database for view tests that need no worker."""

from __future__ import annotations

import uuid

from django.utils import timezone

from refunds import policy
from refunds.flow.nodes import review_request
from refunds.models import Order, Ticket

TRAIL_TO_REVIEW = ["lookup", "fraud_check", "history_check", "check_policy", "triage"]


def awaiting_review(order: Order, *, opened_by=None, note: str = "") -> Ticket:
    """A ticket as the runner mirrors it when its thread waits in `approve`: the payload is the
    graph's own review request, so the queue renders what a real worker would show."""
    amount = order.shipping_fee_cents
    role = policy.review_role(amount, flagged=False, limit_cents=policy.agent_limit_cents())
    late = (order.delivered_on - order.promised_on).days
    payload = review_request(
        {
            "order": order.as_facts(),
            "amount_cents": amount,
            "late_by_days": late,
            "required_role": role,
            "note": note,
            "notes": [f"Delivered {late} days late.", f"{role} review."],
            "flags": [],
            "history": {"refunds": 0, "total_cents": 0},
        }
    )
    return Ticket.objects.create(
        thread_id=f"refund-{order.number}-{uuid.uuid4().hex[:10]}",
        order=order,
        note=note,
        opened_by=opened_by,
        status=Ticket.Status.AWAITING_REVIEW,
        nodes_run=list(TRAIL_TO_REVIEW),
        next_nodes=["approve"],
        pending_interrupt_id=uuid.uuid4().hex,
        pending_payload=payload,
        required_role=role,
        amount_cents=amount,
        review_since=timezone.now(),
    )


def advance_to_review(ticket: Ticket) -> Ticket:
    """Run a new ticket in this process up to its review, and read the mirror it left."""
    from refunds import runner

    assert runner.advance(ticket.pk) == "awaiting_review"
    ticket.refresh_from_db()
    return ticket


def decide(ticket: Ticket, reviewer, answer: str = "approve", reason: str = ""):
    """Answer the ticket's pending review as `reviewer`, through the service the pages use."""
    from refunds import services

    return services.ticket_decide(
        ticket=ticket,
        interrupt_id=ticket.pending_interrupt_id,
        answer=answer,
        reason=reason,
        reviewer=reviewer,
    )
