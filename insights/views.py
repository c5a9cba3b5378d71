"""The managers' dashboard (plots from the database, SVG drawn here) and /metrics."""

from __future__ import annotations

import hmac

from django.conf import settings
from django.contrib.auth.decorators import login_required
from django.core.exceptions import PermissionDenied
from django.http import HttpRequest, HttpResponse
from django.shortcuts import render
from django.views.decorators.cache import never_cache
from django.views.decorators.http import require_GET
from prometheus_client import CONTENT_TYPE_LATEST

from core.clock import day_words
from insights import charts, selectors
from insights import metrics as desk_metrics
from refunds import permissions
from refunds.flow.words import dollars
from refunds.models import Ticket

DAY_CHOICES = (7, 14, 30, 90)


@require_GET
@login_required
def dashboard(request: HttpRequest) -> HttpResponse:
    if not permissions.oversees(request.user):
        raise PermissionDenied("The dashboard is for managers and admins.")
    asked = request.GET.get("days", "")
    days_wanted = int(asked) if asked in map(str, DAY_CHOICES) else 14
    days = selectors.day_range(days_wanted)
    labels = [day_words(d, year=False) for d in days]
    waiting = selectors.waiting_reviews(days)
    minutes = selectors.time_to_decision(days)
    paid = selectors.refunded_cents(days)
    ended = selectors.outcomes(days)
    counted = selectors.refunded_counts(days)
    context = {
        "days": days_wanted,
        "day_choices": DAY_CHOICES,
        "totals": {
            "waiting": Ticket.objects.awaiting().count(),
            "refunded": dollars(sum(paid)),
            "ended": sum(sum(v) for v in ended.values()),
            "tickets_refunded": counted["tickets"],
            "orders_refunded": counted["orders"],
            **selectors.refunds_at_processor(),
            **selectors.waiting_on_customers(),
        },
        "charts": [
            charts.bar_chart(
                "Reviews waiting at the end of each day",
                labels,
                [charts.Series("reviews waiting", "bar-a", waiting)],
                whole=True,
            ),
            charts.bar_chart(
                "Time to decision (median minutes, by day decided)",
                labels,
                [charts.Series("minutes to decide", "bar-b", minutes)],
            ),
            charts.bar_chart(
                "Refunds paid per day",
                labels,
                [charts.Series("refunded", "bar-ok", paid)],
                fmt=lambda v: dollars(round(v)),
                least=100,
            ),
            charts.bar_chart(
                "Tickets ended per day: refunded, declined, rejected",
                labels,
                [
                    charts.Series("refunded", "bar-ok", ended[Ticket.Status.REFUNDED]),
                    charts.Series(
                        "declined by policy", "bar-declined", ended[Ticket.Status.DECLINED]
                    ),
                    charts.Series("rejected", "bar-bad", ended[Ticket.Status.REJECTED]),
                ],
                whole=True,
            ),
        ],
    }
    return render(request, "insights/dashboard.html", context)


@never_cache
@require_GET
def metrics(request: HttpRequest) -> HttpResponse:
    """Prometheus text format, for `Authorization: Bearer <METRICS_TOKEN>` or an admin."""
    token = settings.METRICS_TOKEN
    given = request.headers.get("Authorization", "")
    allowed = bool(token) and hmac.compare_digest(given.encode(), f"Bearer {token}".encode())
    if not allowed and not permissions.is_admin(request.user):
        return HttpResponse(
            "metrics need a token or an admin's session\n",
            status=401,
            headers={"WWW-Authenticate": 'Bearer realm="metrics"'},
            content_type="text/plain",
        )
    return HttpResponse(desk_metrics.render(), content_type=CONTENT_TYPE_LATEST)
