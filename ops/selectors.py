"""Reads the admins' pages share (and the navigation's counts)."""

from __future__ import annotations

from django.db.models import Q, QuerySet

from intake.models import Message
from refunds import outbox, persistence
from refunds.flow.nodes import customer_namespace
from refunds.flow.words import node_words
from refunds.models import Email, ReconcileRun, Ticket

LIMIT = 100
EARLIER_RUNS = 10  # reconcile runs listed below the last one


def failed_threads() -> list[Ticket]:
    """Failed tickets, newest first, each with where its thread stopped (its last checkpoint)."""
    tickets = list(
        Ticket.objects.filter(status=Ticket.Status.FAILED)
        .select_related("order")
        .order_by("-updated_at")[:LIMIT]
    )
    for ticket in tickets:
        snap = persistence.snapshot(ticket.thread_id)
        ticket.last_checkpoint = {
            "step": (snap.metadata or {}).get("step"),
            "next": [node_words(n) for n in snap.next],
            "id": (snap.config or {}).get("configurable", {}).get("checkpoint_id", ""),
            "at": snap.created_at,
        }
    return tickets


def failed_messages() -> list[Message]:
    """Customers' messages the intake gave up on after its attempts, newest first."""
    return list(
        Message.objects.given_up().select_related("ticket").order_by("-finished_at")[:LIMIT]
    )


# The provider took these but says the customer never got them (its tracking webhook).
NOT_RECEIVED = (Email.Delivery.BOUNCED, Email.Delivery.COMPLAINED, Email.Delivery.FAILED)


def _undelivered() -> QuerySet[Email]:
    return Email.objects.filter(outbox.resendable()).filter(
        ~Q(status=Email.Status.SENT) | Q(delivery__in=NOT_RECEIVED)
    )


def undelivered() -> list[tuple[Email, tuple[str, str] | None]]:
    """Emails no run will send any more that never reached the mail server or bounced, oldest
    first; each with what it is about (words, url) when that is not (only) its ticket."""
    emails = list(
        _undelivered().select_related("ticket", "ticket__order").order_by("created_at")[:LIMIT]
    )
    about = outbox.about(emails)
    return [(email, about.get(email.pk)) for email in emails]


def counts() -> dict[str, int]:
    return {
        "failed": Ticket.objects.filter(status=Ticket.Status.FAILED).count()
        + Message.objects.given_up().count(),
        "undelivered": _undelivered().count(),
    }


def reconcile_runs() -> list[ReconcileRun]:
    """The last reconcile runs, newest first: the last one and a few before it."""
    return list(ReconcileRun.objects.order_by("-started_at", "-id")[: EARLIER_RUNS + 1])


def customer_memory(email: str) -> list[dict]:
    """The customer's refunds as the workflow's store remembers them, newest first."""
    items = persistence.store().search(customer_namespace(email), limit=LIMIT)
    records = [{"ticket_key": i.key, **i.value} for i in items]
    return sorted(records, key=lambda r: r.get("refunded_on", ""), reverse=True)
