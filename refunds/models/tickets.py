"""Tickets, the orders they cover, and the desk's roles."""

from __future__ import annotations

from django.conf import settings
from django.db import models, transaction
from django.db.models import Exists, F, OuterRef, Q
from django.db.models.functions import Now
from django.utils import timezone

from refunds import policy
from refunds.models.decisions import Decision, Fork
from refunds.models.ledger import Charge
from refunds.models.orders import Order
from refunds.statuses import (
    TICKET_LEASABLE,
    TICKET_WORK_LEFT,
    TicketStatus,
)


class Role(models.TextChoices):
    AGENT = "agent", "Support agent"
    MANAGER = "manager", "Manager"


ROLE_GROUPS = {Role.AGENT: "Support agents", Role.MANAGER: "Managers"}
ADMIN_GROUP = "Admins"
# Escalated for the interrupt that is pending now, so a later review of the ticket starts afresh.
_FINAL = (TicketStatus.REFUNDED, TicketStatus.DECLINED, TicketStatus.REJECTED)
_ESCALATED = ~Q(escalated_for="") & Q(escalated_for=F("pending_interrupt_id"))


class TicketQuerySet(models.QuerySet):
    def awaiting(self) -> TicketQuerySet:
        """Tickets paused on an interrupt that a person must answer."""
        return self.filter(status=Ticket.Status.AWAITING_REVIEW)

    def review_pending(self, interrupt_id: str) -> TicketQuerySet:
        """Tickets whose review `interrupt_id` still waits (a fork puts another in its place)."""
        return self.awaiting().filter(pending_interrupt_id=interrupt_id)

    def claimable_by(self, user, now) -> TicketQuerySet:
        """Reviews `user` may take or answer: unclaimed, the claim lapsed, or their own."""
        return self.filter(
            Q(claimed_by__isnull=True)
            | Q(claim_expires_at__isnull=True)
            | Q(claim_expires_at__lte=now)
            | Q(claimed_by=user)
        )

    def waiting_on_customers(self) -> TicketQuerySet:
        """Tickets whose review asked the customer and waits on their reply."""
        return self.filter(status=Ticket.Status.AWAITING_CUSTOMER)

    def escalated(self) -> TicketQuerySet:
        """Reviews an agent (or the escalation timer) sent up to managers."""
        return self.filter(_ESCALATED)

    def for_managers(self) -> TicketQuerySet:
        """Awaiting reviews a manager owns: over the agent limit, flagged, or escalated."""
        return self.awaiting().filter(Q(required_role=Role.MANAGER) | _ESCALATED)

    def for_agents(self) -> TicketQuerySet:
        """Awaiting reviews support agents own: within the agent limit, not escalated."""
        return self.awaiting().filter(required_role=Role.AGENT).exclude(_ESCALATED)

    def open(self) -> TicketQuerySet:
        """Tickets not yet in a final state (a failed one waits for an admin: still open)."""
        return self.exclude(status__in=Ticket.FINAL)

    def leasable(self) -> TicketQuerySet:
        """Tickets no worker holds: never leased, or the lease ran out (on the database clock)."""
        return self.filter(Q(lease_expires_at__isnull=True) | Q(lease_expires_at__lt=Now()))

    def answer_waiting(self, settled_before=None) -> TicketQuerySet:
        """A decision (past its grace) or fork recorded before `settled_before`, not applied."""
        return self.filter(_answer_waiting(settled_before))

    def fork_waiting(self) -> TicketQuerySet:
        """Tickets with an admin's fork recorded and not yet applied."""
        return self.filter(Exists(Fork.objects.unapplied().filter(ticket=OuterRef("pk"))))

    def refund_failed_waiting(self) -> TicketQuerySet:
        """A failed refund not handed back yet: the thread owes a run, though it reads refunded."""
        return self.filter(_refund_failed_waiting())

    def grantable(self) -> TicketQuerySet:
        """Tickets whose lease a worker may take now: leasable, and work may be left."""
        not_leasable = [status for status, yes in TICKET_LEASABLE.items() if not yes]
        return self.leasable().filter(~Q(status__in=not_leasable) | _refund_failed_waiting())

    def needing_worker(self, settled_before=None) -> TicketQuerySet:
        """The one answer; `settled_before` leaves fresh work to the task sent for it."""
        young = {} if settled_before is None else {"updated_at__lt": settled_before}
        work_left = [status for status, yes in TICKET_WORK_LEFT.items() if yes]
        return self.leasable().filter(
            Q(status__in=work_left, **young)
            | (~Q(status=Ticket.Status.FAILED) & _answer_waiting(settled_before))
            | _refund_failed_waiting()
        )


def _answer_waiting(settled_before=None) -> Q:
    decided = {} if settled_before is None else {"decided_at__lt": settled_before}
    forked = {} if settled_before is None else {"created_at__lt": settled_before}
    decision = Decision.objects.unapplied().due().filter(ticket=OuterRef("pk"), **decided)
    fork = Fork.objects.unapplied().filter(ticket=OuterRef("pk"), **forked)
    return Q(Exists(decision)) | Q(Exists(fork))


def _refund_failed_waiting() -> Q:
    return Q(Exists(Charge.objects.failed_not_handed_back().filter(ticket=OuterRef("pk"))))


class Ticket(models.Model):
    """Mirror of one LangGraph thread, rebuilt from the checkpoint (the truth) after every run."""

    Status = TicketStatus

    FINAL = _FINAL
    # The rest, CLOSED too: a reply reopens it, so it keeps its orders.
    OPEN = tuple(s for s in Status if s not in _FINAL)

    thread_id = models.CharField(max_length=64, unique=True)
    order = models.ForeignKey(Order, on_delete=models.PROTECT, related_name="tickets")
    note = models.TextField(blank=True)
    opened_by = models.ForeignKey(
        settings.AUTH_USER_MODEL, null=True, on_delete=models.SET_NULL, related_name="+"
    )
    flow_version = models.PositiveSmallIntegerField(default=1)
    reason = models.CharField(
        max_length=20,
        choices=list(policy.REASONS.items()),
        default=policy.LATE_DELIVERY,
        db_default=policy.LATE_DELIVERY,
    )
    reading = models.JSONField(null=True, blank=True)  # None: opened by order number

    status = models.CharField(max_length=20, choices=Status, default=Status.NEW, db_index=True)
    next_nodes = models.JSONField(default=list, blank=True)
    nodes_run = models.JSONField(default=list, blank=True)
    outcome_reason = models.TextField(blank=True)
    pending_interrupt_id = models.CharField(max_length=64, blank=True, db_index=True)
    pending_payload = models.JSONField(null=True, blank=True)
    required_role = models.CharField(max_length=10, choices=Role, blank=True, db_index=True)
    amount_cents = models.PositiveIntegerField(null=True, blank=True)

    # One writer per thread: a lease taken with one conditional UPDATE (refunds/lease.py). The
    # epoch grows with every grant; each write a worker makes for the thread is conditional on it.
    lease_owner = models.CharField(max_length=100, blank=True)
    lease_expires_at = models.DateTimeField(null=True, blank=True)
    lease_epoch = models.BigIntegerField(default=0)
    # A wake-up no worker has taken yet: the sweep piles no second one behind it.
    woken_at = models.DateTimeField(null=True, blank=True)
    # The next grant's epoch follows it: nobody crashed since, so the mirror is exact.
    mirror_epoch = models.BigIntegerField(default=0)
    attempts = models.PositiveIntegerField(default=0)
    last_error = models.TextField(blank=True)

    # The review desk. A claim is taken and released with one conditional UPDATE
    # (services.review_claim); it lapses at claim_expires_at, on the database clock.
    claimed_by = models.ForeignKey(
        settings.AUTH_USER_MODEL, null=True, blank=True, on_delete=models.SET_NULL, related_name="+"
    )
    claim_expires_at = models.DateTimeField(null=True, blank=True)
    # Counts only while that interrupt is pending: a fork's new review starts at its own level.
    escalated_for = models.CharField(max_length=64, blank=True)
    escalation_note = models.TextField(blank=True)
    # Kept while the same interrupt waits: the escalation timers and the queue's ages count from it.
    review_since = models.DateTimeField(null=True, blank=True)
    reminded_for = models.CharField(max_length=64, blank=True)

    created_at = models.DateTimeField(auto_now_add=True)
    updated_at = models.DateTimeField(auto_now=True)
    # Written by the database alone (triggers, migration 0047): the desk's change clock. Moves
    # to a new high in every transaction that changes what the ticket's queue card shows (the
    # columns above, a decision on it), never back; the queue's poll asks its max (one index read).
    card_version = models.BigIntegerField(null=True, editable=False)

    objects = TicketQuerySet.as_manager()

    # Not columns: set by the desk's pages (reviews.views.common, reviews.views.queue).
    pending_decision: Decision | None
    decided_line: str
    undo_decision: Decision | None
    card_key: str  # the card's version, as the queue's poll compares it (reviews/rows.py)
    place: str  # where a poll draws the card: "" where it is, "top", or after "#review-<pk>"

    class Meta:
        ordering = ["-id"]
        indexes = [
            models.Index(fields=["status", "required_role", "-id"], name="ticket_queue_idx"),
            models.Index(fields=["status", "lease_expires_at"], name="ticket_sweep_idx"),
            models.Index(fields=["opened_by", "-id"], name="ticket_recent_idx"),
            # The review queue reads only this index (on SQLite a row's later columns sit behind
            # its JSON); no narrower twin, which SQLite's planner picks once ANALYZE has run.
            models.Index(
                fields=[
                    "status",
                    "review_since",
                    "id",
                    "required_role",
                    "opened_by",
                    "escalated_for",
                    "pending_interrupt_id",
                    "claimed_by",
                    "claim_expires_at",
                    "card_version",
                ],
                name="ticket_queue_cover_idx",
            ),
            models.Index(fields=["card_version"], name="ticket_card_version_idx"),
            # The tickets page sorts by amount and filters by age at 100,000 tickets.
            models.Index(fields=["amount_cents", "id"], name="ticket_amount_idx"),
            models.Index(fields=["status", "amount_cents", "id"], name="ticket_status_amount_idx"),
            models.Index(fields=["created_at"], name="ticket_created_idx"),
        ]

    def __str__(self) -> str:
        return f"Ticket {self.pk} ({self.thread_id})"

    def save(self, *args, **kwargs) -> None:
        """Linked to its first order in one transaction: the link's partial UNIQUE index refuses
        a second open ticket."""
        if self.pk is not None:
            return super().save(*args, **kwargs)
        with transaction.atomic():
            super().save(*args, **kwargs)
            TicketOrder.close_finished([self.order_id])
            TicketOrder.objects.create(
                ticket=self, order_id=self.order_id, position=0, open=self.status in self.OPEN
            )

    def order_numbers(self) -> list[str]:
        return [link.order.number for link in self.links.all()]

    @property
    def opener_words(self) -> str:
        """Who opened it, said one way on every page."""
        if self.opened_by is not None:
            return self.opened_by.username
        return "the intake" if self.reading is not None else "an integration"

    @property
    def is_final(self) -> bool:
        return self.status in self.FINAL

    @property
    def is_escalated(self) -> bool:
        return bool(self.escalated_for) and self.escalated_for == self.pending_interrupt_id

    @property
    def review_role(self) -> str:
        """Who owns the pending review: its triage level, or managers once escalated."""
        return Role.MANAGER if self.is_escalated else self.required_role

    def claim_holder(self, now=None):
        """The user whose claim on this review is live, or None."""
        if self.claimed_by_id is None or self.claim_expires_at is None:
            return None
        if self.claim_expires_at <= (now or timezone.now()):
            return None
        return self.claimed_by


def user_roles(user) -> set[str]:
    if not user.is_authenticated:
        return set()
    cached = getattr(user, "_refund_roles", None)
    if cached is None:
        cached = set(user.groups.values_list("name", flat=True))
        user._refund_roles = cached
    return cached


class TicketOrder(models.Model):
    """One order a ticket covers; one open ticket per order, whoever races."""

    ticket = models.ForeignKey(Ticket, on_delete=models.CASCADE, related_name="links")
    order = models.ForeignKey(Order, on_delete=models.PROTECT, related_name="links")
    position = models.PositiveSmallIntegerField(default=0)
    open = models.BooleanField(default=True)

    class Meta:
        ordering = ["ticket", "position"]
        constraints = [
            models.UniqueConstraint(fields=["ticket", "order"], name="ticket_order_once"),
            # A retried POST, or two tickets naming one order at once, cannot refund it twice.
            models.UniqueConstraint(
                fields=["order"], condition=Q(open=True), name="one_open_ticket_per_order"
            ),
        ]

    def __str__(self) -> str:
        return f"{self.ticket} covers {self.order}"

    @classmethod
    def close_finished(cls, order_ids) -> None:
        """Close these orders' links whose ticket finished: lazily, by whoever needs the order."""
        cls.objects.filter(order_id__in=order_ids, open=True).exclude(
            ticket__status__in=Ticket.OPEN
        ).update(open=False)
