"""/metrics: what processes counted (multiprocess mode) plus what the database knows now."""

from __future__ import annotations

from collections.abc import Iterator
from datetime import timedelta

from django.db.models import Count, Min
from django.utils import timezone
from prometheus_client import CollectorRegistry, generate_latest, multiprocess
from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily, Metric

from refunds.models import Charge, Decision, Email, Role, StripeEvent, Ticket
from webhooks.models import Delivery


class DeskCollector:
    """From the database: right whichever process did the work, nothing to reset on restart."""

    def collect(self) -> Iterator[Metric]:
        now = timezone.now()
        waiting = GaugeMetricFamily(
            "refund_desk_reviews_waiting", "Reviews waiting on a person, by role.", labels=["role"]
        )
        by_role = dict(
            Ticket.objects.awaiting().values_list("required_role").annotate(n=Count("id"))
        )
        for role in Role.values:
            waiting.add_metric([role], by_role.get(role, 0))
        yield waiting

        oldest = Ticket.objects.awaiting().aggregate(since=Min("updated_at"))["since"]
        yield GaugeMetricFamily(
            "refund_desk_oldest_review_age_seconds",
            "How long the oldest waiting review has waited (0 when none waits).",
            value=(now - oldest).total_seconds() if oldest else 0.0,
        )

        decisions = CounterMetricFamily(
            "refund_desk_decisions",
            "Reviewers' decisions recorded, by answer (rate() of it: decisions per minute).",
            labels=["answer"],
        )
        counts = dict(Decision.objects.values_list("answer").annotate(n=Count("id")))
        for answer in Decision.Answer.values:
            decisions.add_metric([answer], counts.get(answer, 0))
        yield decisions
        yield GaugeMetricFamily(
            "refund_desk_decisions_last_minute",
            "Decisions recorded in the last 60 seconds.",
            value=Decision.objects.filter(decided_at__gte=now - timedelta(minutes=1)).count(),
        )

        tickets = GaugeMetricFamily("refund_desk_tickets", "Tickets by status.", labels=["status"])
        statuses = dict(Ticket.objects.values_list("status").annotate(n=Count("id")))
        for status in Ticket.Status.values:
            tickets.add_metric([status], statuses.get(status, 0))
        yield tickets

        yield GaugeMetricFamily(
            "refund_desk_emails_undelivered",
            "Customer emails of finished tickets that the mail server has not accepted.",
            value=Email.objects.exclude(status=Email.Status.SENT)
            .filter(ticket__status__in=Ticket.FINAL)
            .count(),
        )
        yield GaugeMetricFamily(
            "refund_desk_refunds_pending",
            "Refunds the processor accepted and has not finished (on their way to the bank).",
            value=Charge.objects.on_its_way().count(),
        )
        yield GaugeMetricFamily(
            "refund_desk_refunds_failed",
            "Refunds the processor accepted and then failed or canceled.",
            value=Charge.objects.failed_at_processor().count(),
        )
        yield GaugeMetricFamily(
            "refund_desk_tickets_disputed",
            "Tickets waiting on a manager because their payment has an open dispute.",
            value=Ticket.objects.filter(
                status=Ticket.Status.AWAITING_REVIEW, pending_payload__has_key="disputed"
            ).count(),
        )
        yield GaugeMetricFamily(
            "refund_desk_stripe_events_unhandled",
            "Stripe events stored and not handled yet (the recovery sweep hands them on).",
            value=StripeEvent.objects.filter(handled_at__isnull=True).count(),
        )
        webhooks = GaugeMetricFamily(
            "refund_desk_webhook_deliveries", "Webhook deliveries by status.", labels=["status"]
        )
        deliveries = dict(Delivery.objects.values_list("status").annotate(n=Count("id")))
        for status in Delivery.Status.values:  # "sent" keeps its label from before: "delivered"
            label = "delivered" if status == Delivery.Status.SENT else status
            webhooks.add_metric([label], deliveries.get(status, 0))
        yield webhooks


def render() -> bytes:
    registry = CollectorRegistry()
    multiprocess.MultiProcessCollector(registry)
    registry.register(DeskCollector())
    return generate_latest(registry)
