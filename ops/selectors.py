"""Reads the admins' pages share (and the navigation's counts)."""

from __future__ import annotations

from dataclasses import dataclass

from django.db.models import Q, QuerySet

from intake.models import Message
from ops.models import Erasure
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


# What ends each kind of open ticket an erasure waits for: it goes on once they all have.
WHAT_ENDS: dict[str, str] = {
    Ticket.Status.NEW: "it runs on by itself, to its end or to a review",
    Ticket.Status.RUNNING: "it runs on by itself, to its end or to a review",
    Ticket.Status.AWAITING_REVIEW: "a reviewer decides it; a manager may reject it",
    Ticket.Status.AWAITING_CUSTOMER: "the customer's reply, or the wait's end, brings it back "
    "to review; a manager may reject it then",
    Ticket.Status.CLOSED: "closed for no reply but not ended: a reply reopens it for review, "
    "where a manager may reject it",
    Ticket.Status.FAILED: "an admin retries it (Failed), and it runs on to its end or a review",
}
ENDED = "it has ended: the erasure goes on at the next sweep"


@dataclass(frozen=True)
class ErasureRow:
    erasure: Erasure
    waiting: list[tuple[Ticket, str]]  # its open tickets, each with what would end it
    report: list[tuple[str, str, int]]  # (store, what, count): a template misreads key "items"


def erasures() -> list[ErasureRow]:
    """Erasures, newest first, each with the open tickets it waits for and its report's rows."""
    rows = list(Erasure.objects.order_by("-requested_at", "-id")[:LIMIT])
    waits = {e.pk: e.waiting_for if e.status == Erasure.Status.WAITING else [] for e in rows}
    tickets = Ticket.objects.in_bulk({pk for ids in waits.values() for pk in ids})
    return [
        ErasureRow(
            erasure=erasure,
            waiting=[
                (ticket, WHAT_ENDS.get(ticket.status, ENDED))
                for pk in waits[erasure.pk]
                if (ticket := tickets.get(pk)) is not None
            ],
            report=[
                (store, what, count)
                for store, counts in (erasure.report or {}).items()
                for what, count in (counts.items() if isinstance(counts, dict) else [])
            ],
        )
        for erasure in rows
    ]
