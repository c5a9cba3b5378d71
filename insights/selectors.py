"""What the dashboard plots: one query per chart, grouped by the day in the reviewer's time zone
(a refund at 23:30 UTC counts on the next day for a reviewer in Tokyo)."""

from __future__ import annotations

import statistics
from datetime import date, datetime, timedelta

from django.db.models import Count, Exists, Min, OuterRef, Q, Sum
from django.db.models.functions import TruncDate
from django.utils import timezone

from refunds.models import Charge, CustomerQuestion, Decision, Ticket


def day_range(days: int) -> list[date]:
    today = timezone.localdate()
    return [today - timedelta(days=days - 1 - i) for i in range(days)]


def _start_of(day: date) -> datetime:
    return datetime.combine(day, datetime.min.time(), tzinfo=timezone.get_current_timezone())


def _end_of(day: date) -> datetime:
    return _start_of(day + timedelta(days=1))


def waiting_reviews(days: list[date]) -> list[int]:
    """Reviews waiting at the end of each day: from the ticket's opening to its first decision."""
    start = _start_of(days[0])
    decided = Decision.objects.filter(ticket=OuterRef("pk"))
    rows = (
        Ticket.objects.filter(
            Q(status=Ticket.Status.AWAITING_REVIEW)
            | Q(Exists(decided), created_at__lt=_end_of(days[-1]))
        )
        .annotate(first_decision=Min("decisions__decided_at"))
        .filter(Q(first_decision__isnull=True) | Q(first_decision__gte=start))
        .values_list("created_at", "first_decision")
    )
    spans = list(rows)
    return [
        sum(1 for opened, first in spans if opened < end and (first is None or first >= end))
        for end in map(_end_of, days)
    ]


def time_to_decision(days: list[date]) -> list[float]:
    """Median minutes from opening to the first decision, for decisions made each day."""
    start = _start_of(days[0])
    firsts = (
        Ticket.objects.annotate(first_decision=Min("decisions__decided_at"))
        .filter(first_decision__gte=start)
        .values_list("created_at", "first_decision")
    )
    by_day: dict[date, list[float]] = {}
    for opened, first in firsts:
        by_day.setdefault(timezone.localdate(first), []).append(
            (first - opened).total_seconds() / 60
        )
    return [round(statistics.median(by_day[d]), 1) if d in by_day else 0.0 for d in days]


def refunds_at_processor() -> dict[str, int]:
    """Refunds the processor accepted that are still on their way, and those that failed."""
    return {
        "on_its_way": Charge.objects.on_its_way().count(),
        "failed_at_processor": Charge.objects.failed_at_processor().count(),
    }


def refunded_cents(days: list[date]) -> list[int]:
    """Refunds paid each day, in cents (the plot says them through dollars())."""
    start = _start_of(days[0])
    rows = (
        Charge.objects.filter(status=Charge.Status.SUCCEEDED, settled_at__gte=start)
        .annotate(day=TruncDate("settled_at"))
        .values("day")
        .annotate(cents=Sum("amount_cents"))
    )
    found = {row["day"]: row["cents"] for row in rows}
    return [found.get(d, 0) for d in days]


def outcomes(days: list[date]) -> dict[str, list[int]]:
    """Tickets that ended each day, by how: refunded, declined by policy, rejected."""
    start = _start_of(days[0])
    rows = (
        Ticket.objects.filter(status__in=Ticket.FINAL, updated_at__gte=start)
        .annotate(day=TruncDate("updated_at"))
        .values("day", "status")
        .annotate(n=Count("id"))
    )
    found = {(row["day"], row["status"]): row["n"] for row in rows}
    return {status: [found.get((d, status), 0) for d in days] for status in Ticket.FINAL}


def refunded_counts(days: list[date]) -> dict[str, int]:
    """Over the period: tickets that ended refunded, and the orders money was refunded for."""
    start = _start_of(days[0])
    tickets = Ticket.objects.filter(status=Ticket.Status.REFUNDED, updated_at__gte=start).count()
    orders = (
        Charge.objects.filter(status=Charge.Status.SUCCEEDED, settled_at__gte=start)
        .values("ticket_id", "order_id")
        .distinct()
        .count()
    )
    return {"tickets": tickets, "orders": orders}


def waiting_on_customers() -> dict[str, object]:
    """Tickets waiting on a customer's reply now, and since when the longest has waited."""
    waiting = CustomerQuestion.objects.filter(
        replied_at__isnull=True, ticket__status=Ticket.Status.AWAITING_CUSTOMER
    )
    return {
        "on_customers": Ticket.objects.waiting_on_customers().count(),
        "on_customers_since": waiting.aggregate(oldest=Min("asked_at"))["oldest"],
    }
