"""Tickets paused on a review, built straight in the database for view tests that need no worker."""

from __future__ import annotations

import uuid

from django.utils import timezone

from refunds import policy
from refunds.flow import parts as refund_parts
from refunds.flow.nodes import review_request
from refunds.models import Order, Ticket


def awaiting_review(order: Order, *, opened_by=None, note: str = "") -> Ticket:
    """A ticket as the runner mirrors it when its thread waits in `approve`: the payload is the
    graph's own review request, so the queue renders what a real worker would show."""
    amount = order.shipping_fee_cents
    role = policy.review_role(amount, flagged=False, limit_cents=policy.agent_limit_cents())
    late = (order.delivered_on - order.promised_on).days
    history = {"refunds": 0, "total_cents": 0}
    check = {
        "number": order.number,
        "order": order.facts(),
        "balance_cents": amount,
        "amount_cents": amount,
        "parts": [refund_parts.shipping(amount)],
        "parts_why": "",
        "late_by_days": late,
        "refundable": True,
        "declined_reason": "",
        "flags": [],
        "notes": [f"Delivered {late} days late."],
        "history": history,
    }
    payload = review_request(
        {
            "order_numbers": [order.number],
            "checks": {order.number: check},
            "order": order.facts(),
            "amount_cents": amount,
            "late_by_days": late,
            "required_role": role,
            "note": note,
            "notes": [f"Delivered {late} days late.", f"{role} review."],
            "flags": [],
            "history": history,
        }
    )
    return Ticket.objects.create(
        thread_id=f"refund-{order.number}-{uuid.uuid4().hex[:10]}",
        order=order,
        note=note,
        opened_by=opened_by,
        status=Ticket.Status.AWAITING_REVIEW,
        nodes_run=[f"check_order:{order.number}", "gather", "triage"],
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
        reviewer=reviewer,
        orders=services.review_answers(ticket, answer=answer, reason=reason),
    )


def many_tickets(count: int, *, prefix: str, waiting: bool = False, **per_ticket) -> list[Ticket]:
    """`count` tickets of as many new orders ("<prefix>000000" on; customers "Customer <n>"), in
    two statements: finished (refunded) ones, or with `waiting` ones awaiting review with an
    interrupt, a payload and a review clock. Odd ones are the agents', even ones the managers'.
    `per_ticket` names a field and a function of the ticket's index for it."""
    from datetime import date, timedelta

    start = Order.objects.filter(number__startswith=prefix).count()
    orders = Order.objects.bulk_create(
        Order(
            number=f"{prefix}{start + n:06d}",
            customer_name=f"Customer {start + n}",
            customer_email=f"c{start + n}@example.com",
            promised_on=date(2026, 11, 2),
            delivered_on=date(2026, 11, 5),
            shipping_fee_cents=500 + n % 4000,
        )
        for n in range(count)
    )
    now = timezone.now()

    def ticket(n: int, order: Order) -> Ticket:
        fields = {name: value(n) for name, value in per_ticket.items()}
        if waiting:
            fields |= {
                "status": Ticket.Status.AWAITING_REVIEW,
                "pending_interrupt_id": f"{order.pk:032x}",
                "pending_payload": {"notes": ["Late."], "late_by_days": 3},
                "review_since": now - timedelta(minutes=n % 90),
            }
        else:
            fields["status"] = Ticket.Status.REFUNDED
        return Ticket(
            thread_id=f"{prefix.lower()}-{order.number}",
            order=order,
            required_role="agent" if n % 2 else "manager",
            amount_cents=order.shipping_fee_cents,
            **fields,
        )

    return Ticket.objects.bulk_create(ticket(n, order) for n, order in enumerate(orders))


def refunded_by_parts(number: str, parts: list[dict], *, opened_by, reviewer):
    """A ticket for order `number` reported damaged, run in this process to its review, approved
    with `parts` (as the parts form or the API sends them) and run to its end."""
    from refunds import policy, runner, services

    ticket = advance_to_review(
        services.ticket_open(
            order_number=number,
            opened_by=opened_by,
            reason=policy.DAMAGED,
            note="Customer: the vase arrived smashed",
        )
    )
    services.ticket_decide(
        ticket=ticket,
        interrupt_id=ticket.pending_interrupt_id,
        reviewer=reviewer,
        orders=services.review_answers(
            ticket, answer="approve", orders={number: {"answer": "approve", "parts": parts}}
        ),
    )
    assert runner.advance(ticket.pk) == "refunded"
    ticket.refresh_from_db()
    return ticket


def in_one_shape(review: dict, value: dict) -> dict:
    """A resume value as the desk sends it: `value`'s shorthands (its answer for every open
    order, a lower `amount_cents`, answers per order) expanded against the pending review's
    payload into the one shape (refunds/flow/answers.py), as services.review_answers does."""
    from refunds.flow import answers

    if value.get("answer") not in ("approve", "reject"):
        return value
    shape = {k: v for k, v in value.items() if k not in ("amount_cents", "orders")}
    shape["orders"] = answers.expanded(
        review["orders"],
        answer=value["answer"],
        reason=value.get("reason", ""),
        amount_cents=value.get("amount_cents"),
        orders=value.get("orders"),
    )
    return shape


def shipped(cents: int) -> dict:
    """An approval of an order's shipping fee, or `cents` of it, as a decision records it."""
    return {
        "answer": "approve",
        "parts": [{"shipping": True, "amount_cents": cents}],
        "amount_cents": cents,
    }
