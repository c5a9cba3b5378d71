from __future__ import annotations

import secrets
from datetime import timedelta

from django.conf import settings
from django.db import models
from django.db.models import Case, F, Q, Value, When
from django.utils import timezone


class Role(models.TextChoices):
    AGENT = "agent", "Support agent"
    MANAGER = "manager", "Manager"


ROLE_GROUPS = {Role.AGENT: "Support agents", Role.MANAGER: "Managers"}
ADMIN_GROUP = "Admins"


class Order(models.Model):
    """The demo catalogue: what lookup reads."""

    number = models.CharField(max_length=32, unique=True)
    customer_name = models.CharField(max_length=200)
    customer_email = models.EmailField()
    promised_on = models.DateField()
    delivered_on = models.DateField()
    shipping_fee_cents = models.PositiveIntegerField()

    def __str__(self) -> str:
        return f"Order {self.number}"

    def as_facts(self) -> dict:
        return {
            "number": self.number,
            "customer_name": self.customer_name,
            "customer_email": self.customer_email,
            "promised_on": self.promised_on.isoformat(),
            "delivered_on": self.delivered_on.isoformat(),
            "fee_cents": self.shipping_fee_cents,
        }


class TicketQuerySet(models.QuerySet):
    def awaiting(self) -> TicketQuerySet:
        """Tickets paused on an interrupt that a person must answer."""
        return self.filter(status=Ticket.Status.AWAITING_REVIEW)

    def reviewable_by(self, user) -> TicketQuerySet:
        """Pending reviews this user may decide: agents up to $20, managers above, admins all."""
        qs = self.awaiting()
        roles = user_roles(user)
        if ADMIN_GROUP in roles or user.is_superuser:
            return qs
        return qs.filter(required_role__in=[r for r in Role if ROLE_GROUPS[r] in roles])

    def unfinished(self) -> TicketQuerySet:
        """Tickets whose thread may have work left that no person is waiting on."""
        return self.filter(status__in=[Ticket.Status.NEW, Ticket.Status.RUNNING])

    def leasable(self, now) -> TicketQuerySet:
        """Tickets no worker holds: never leased, or the lease ran out."""
        return self.filter(Q(lease_expires_at__isnull=True) | Q(lease_expires_at__lt=now))


class Ticket(models.Model):
    """Mirror of one LangGraph thread. The checkpointer is the truth; this row is what the
    queue, the API and the sweep read, rebuilt from the checkpoint after every run."""

    class Status(models.TextChoices):
        NEW = "new", "New"
        RUNNING = "running", "Running"
        AWAITING_REVIEW = "awaiting_review", "Awaiting review"
        REFUNDED = "refunded", "Refunded"
        DECLINED = "declined", "Declined by policy"
        REJECTED = "rejected", "Rejected by reviewer"
        FAILED = "failed", "Failed"

    FINAL = (Status.REFUNDED, Status.DECLINED, Status.REJECTED)

    thread_id = models.CharField(max_length=64, unique=True)
    order = models.ForeignKey(Order, on_delete=models.PROTECT, related_name="tickets")
    note = models.TextField(blank=True)
    opened_by = models.ForeignKey(
        settings.AUTH_USER_MODEL, null=True, on_delete=models.SET_NULL, related_name="+"
    )
    flow_version = models.PositiveSmallIntegerField(default=1)

    status = models.CharField(max_length=20, choices=Status, default=Status.NEW, db_index=True)
    next_nodes = models.JSONField(default=list, blank=True)
    nodes_run = models.JSONField(default=list, blank=True)
    outcome_reason = models.TextField(blank=True)
    pending_interrupt_id = models.CharField(max_length=64, blank=True, db_index=True)
    pending_payload = models.JSONField(null=True, blank=True)
    required_role = models.CharField(max_length=10, choices=Role, blank=True, db_index=True)
    amount_cents = models.PositiveIntegerField(null=True, blank=True)

    # One writer per thread: a lease taken with one conditional UPDATE.
    lease_owner = models.CharField(max_length=100, blank=True)
    lease_expires_at = models.DateTimeField(null=True, blank=True)
    attempts = models.PositiveIntegerField(default=0)
    last_error = models.TextField(blank=True)

    created_at = models.DateTimeField(auto_now_add=True)
    updated_at = models.DateTimeField(auto_now=True)

    objects = TicketQuerySet.as_manager()

    class Meta:
        ordering = ["-id"]
        indexes = [
            models.Index(fields=["status", "required_role", "-id"], name="ticket_queue_idx"),
            models.Index(fields=["status", "lease_expires_at"], name="ticket_sweep_idx"),
            models.Index(fields=["opened_by", "-id"], name="ticket_recent_idx"),
        ]

    def __str__(self) -> str:
        return f"Ticket {self.pk} ({self.thread_id})"

    @property
    def is_final(self) -> bool:
        return self.status in self.FINAL

    # --- lease ---------------------------------------------------------------------------------
    def try_lease(self, owner: str, seconds: float) -> bool:
        """Take the thread's lease if nobody holds it; one UPDATE, so two workers never both win."""
        now = timezone.now()
        won = (
            Ticket.objects.filter(pk=self.pk)
            .leasable(now)
            .update(
                lease_owner=owner,
                lease_expires_at=now + timedelta(seconds=seconds),
                attempts=F("attempts") + 1,
                status=Case(
                    When(status=Ticket.Status.NEW, then=Value(Ticket.Status.RUNNING)),
                    default=F("status"),
                ),
                updated_at=now,
            )
        )
        return won == 1

    def renew_lease(self, owner: str, seconds: float) -> bool:
        expires = timezone.now() + timedelta(seconds=seconds)
        return (
            Ticket.objects.filter(pk=self.pk, lease_owner=owner).update(lease_expires_at=expires)
            == 1
        )


def user_roles(user) -> set[str]:
    if not user.is_authenticated:
        return set()
    cached = getattr(user, "_refund_roles", None)
    if cached is None:
        cached = set(user.groups.values_list("name", flat=True))
        user._refund_roles = cached
    return cached


def may_decide(user, required_role: str) -> bool:
    roles = user_roles(user)
    if user.is_superuser or ADMIN_GROUP in roles:
        return True
    return ROLE_GROUPS.get(required_role, "-") in roles if required_role else False


def ticket_pk(thread_id: str) -> int:
    return Ticket.objects.values_list("pk", flat=True).get(thread_id=thread_id)


class Decision(models.Model):
    """A reviewer's answer, stored before it is applied: a crash between the two is repaired by
    the sweep, and the UNIQUE interrupt id means one answer per question."""

    class Answer(models.TextChoices):
        APPROVE = "approve", "Approve"
        REJECT = "reject", "Reject"

    ticket = models.ForeignKey(Ticket, on_delete=models.CASCADE, related_name="decisions")
    interrupt_id = models.CharField(max_length=64, unique=True)
    reviewer = models.ForeignKey(settings.AUTH_USER_MODEL, on_delete=models.PROTECT)
    answer = models.CharField(max_length=10, choices=Answer)
    reason = models.TextField(blank=True)
    decided_at = models.DateTimeField(auto_now_add=True)
    applied_at = models.DateTimeField(null=True, blank=True)
    refused_reason = models.TextField(blank=True)

    class Meta:
        ordering = ["decided_at"]

    def __str__(self) -> str:
        return f"{self.get_answer_display()} by {self.reviewer} on {self.ticket}"

    def as_resume_value(self) -> dict:
        return {"answer": self.answer, "reason": self.reason, "reviewer": self.reviewer.username}


class Fork(models.Model):
    """An admin's correction: the thread is forked from its checkpoint before triage with a
    corrected amount. The row is the audit entry; a worker applies it under the lease."""

    ticket = models.ForeignKey(Ticket, on_delete=models.CASCADE, related_name="forks")
    by = models.ForeignKey(settings.AUTH_USER_MODEL, on_delete=models.PROTECT)
    amount_cents = models.PositiveIntegerField()
    reason = models.TextField()
    created_at = models.DateTimeField(auto_now_add=True)
    from_checkpoint_id = models.CharField(max_length=64, blank=True)
    previous_amount_cents = models.PositiveIntegerField(null=True, blank=True)
    applied_at = models.DateTimeField(null=True, blank=True)
    refused_reason = models.TextField(blank=True)

    class Meta:
        ordering = ["created_at"]

    def __str__(self) -> str:
        return f"Fork of {self.ticket} by {self.by} to ${self.amount_cents / 100:.2f}"


class Charge(models.Model):
    """The money ledger. The UNIQUE idempotency key is what makes a repeated charge harmless."""

    ticket = models.ForeignKey(Ticket, on_delete=models.PROTECT, related_name="charges")
    idempotency_key = models.CharField(max_length=150, unique=True)
    amount_cents = models.PositiveIntegerField()
    receipt = models.CharField(max_length=64, unique=True)
    created_at = models.DateTimeField(auto_now_add=True)

    def __str__(self) -> str:
        return f"{self.receipt}: ${self.amount_cents / 100:.2f}"


class Email(models.Model):
    """The outbox: one row per message key; sent_at says it went out."""

    ticket = models.ForeignKey(Ticket, on_delete=models.CASCADE, related_name="emails")
    key = models.CharField(max_length=150, unique=True)
    to = models.EmailField()
    subject = models.CharField(max_length=200)
    body = models.TextField()
    created_at = models.DateTimeField(auto_now_add=True)
    sent_at = models.DateTimeField(null=True, blank=True)

    def __str__(self) -> str:
        return f"{self.subject} -> {self.to}"


class ApiToken(models.Model):
    user = models.OneToOneField(
        settings.AUTH_USER_MODEL, on_delete=models.CASCADE, related_name="api_token"
    )
    key = models.CharField(max_length=64, unique=True)
    created_at = models.DateTimeField(auto_now_add=True)

    def __str__(self) -> str:
        return f"API token of {self.user}"

    @classmethod
    def for_user(cls, user) -> ApiToken:
        token, _ = cls.objects.get_or_create(user=user, defaults={"key": secrets.token_hex(20)})
        return token
