"""The outbox (customer email), the audit trail and the recovery sweep's runs."""

from __future__ import annotations

from django.conf import settings
from django.db import models

from core.clock import local_words
from refunds.models.tickets import Ticket
from refunds.statuses import EmailDelivery, OutboxKind, OutboxStatus


class OfKind(models.Manager):
    """One kind's rows; a class attribute, since Django makes related managers without args."""

    kind = OutboxKind.EMAIL

    def get_queryset(self) -> models.QuerySet:
        return super().get_queryset().filter(kind=self.kind)


class Email(models.Model):
    """One row per key: "handed over" before the final "." and "sent" after, each in its own
    short transaction; a takeover marks a handover with no answer "outcome unknown"."""

    Status = OutboxStatus
    Delivery = EmailDelivery
    Kind = OutboxKind

    # None: mail about no ticket, fenced by its message's lease instead (refunds/mail.py).
    ticket = models.ForeignKey(
        Ticket, null=True, blank=True, on_delete=models.CASCADE, related_name="emails"
    )
    key = models.CharField(max_length=150, unique=True)
    to = models.EmailField()
    subject = models.CharField(max_length=200)
    body = models.TextField()
    status = models.CharField(max_length=10, choices=Status, default=Status.PENDING)
    claimed_by = models.CharField(max_length=100, blank=True)  # "epoch:<n>" or "resend:<id>"
    claimed_at = models.DateTimeField(null=True, blank=True)
    attempts = models.PositiveIntegerField(default=0)
    last_error = models.TextField(blank=True)
    created_at = models.DateTimeField(auto_now_add=True)
    sent_at = models.DateTimeField(null=True, blank=True)
    # The final "." handed over, its answer not yet recorded: "epoch:<n> on <host>:<pid>".
    handed_over_at = models.DateTimeField(null=True, blank=True)
    handed_over_by = models.CharField(max_length=200, blank=True)
    # The last handover whose answer was never recorded: a second copy may exist from then.
    outcome_unknown_at = models.DateTimeField(null=True, blank=True)
    outcome_unknown_by = models.CharField(max_length=200, blank=True)
    # Database defaults: the outbox's claim is a hand-written INSERT.
    provider_message_id = models.CharField(
        max_length=255, blank=True, default="", db_default="", db_index=True
    )
    delivery = models.CharField(
        max_length=12, choices=Delivery, blank=True, default="", db_default=""
    )
    delivery_detail = models.CharField(max_length=500, blank=True, default="", db_default="")
    delivery_at = models.DateTimeField(null=True, blank=True)
    # ISO 639-1, and the same email in the desk's language when that differs.
    language = models.CharField(max_length=8, blank=True, default="", db_default="")
    desk_text = models.TextField(blank=True, default="", db_default="")
    kind = models.CharField(max_length=8, choices=Kind, default=Kind.EMAIL, db_default=Kind.EMAIL)
    # A webhook delivery's (webhooks.models.Delivery).
    event = models.ForeignKey(
        "webhooks.Event", null=True, blank=True, on_delete=models.CASCADE, related_name="deliveries"
    )
    endpoint = models.ForeignKey(
        "webhooks.Endpoint", null=True, blank=True, on_delete=models.CASCADE, related_name="+"
    )
    next_attempt_at = models.DateTimeField(null=True, blank=True)
    last_status_code = models.PositiveSmallIntegerField(null=True, blank=True)

    objects = OfKind()

    class Meta:
        indexes = [models.Index(fields=["status", "next_attempt_at"], name="outbox_due_idx")]

    def __str__(self) -> str:
        return f"{self.subject} -> {self.to}"


class AuditEvent(models.Model):
    """One append-only record per action on a ticket; never edited or deleted."""

    class Action(models.TextChoices):
        OPEN = "open", "Opened"
        UNDO = "undo", "Undid a decision"  # within its grace; `answer` holds what was undone
        CLAIM = "claim", "Claimed"
        UNCLAIM = "unclaim", "Unclaimed"
        ESCALATE = "escalate", "Escalated"
        APPROVE = "approve", "Approved"
        REJECT = "reject", "Rejected"
        EDIT = "edit", "Edited the amount"
        FORK = "fork", "Forked"
        RETRY = "retry", "Retried"
        RESEND = "resend", "Resent an email"
        NOTE = "note", "Added a note"
        # Several orders answered order by order (older rows: approve, reject or edit).
        ANSWER = "answer", "Answered per order"
        REFUND_FAILED = "refund_failed", "Refund failed at the processor"
        ASK = "ask", "Asked the customer"
        # answer: {"resumed": bool, "message": id, "why": why a reply resumed nothing}
        REPLY = "reply", "The customer replied"
        # answer: {"erasure": id}; the customer's data on the ticket replaced or removed
        ERASE = "erase", "Erased the customer's data"
        # answer: {"answer": received/flagged/no_return, "orders", "why": why it resumed nothing}
        RETURN = "return", "The goods' return"

    ticket = models.ForeignKey(Ticket, on_delete=models.CASCADE, related_name="audit_events")
    actor = models.ForeignKey(
        settings.AUTH_USER_MODEL, null=True, blank=True, on_delete=models.PROTECT, related_name="+"
    )  # None: the desk itself (a timer, the sweep)
    action = models.CharField(max_length=20, choices=Action)
    at = models.DateTimeField(auto_now_add=True, db_index=True)
    seen = models.JSONField(default=dict, blank=True)  # what the actor was shown
    answer = models.JSONField(default=dict, blank=True)  # what they answered or changed
    checkpoint_id = models.CharField(max_length=64, blank=True)  # where the thread got after
    note = models.TextField(blank=True)
    # The ticket's amount at that moment; empty on older rows (the CSV never reads today's).
    amount_cents = models.PositiveIntegerField(null=True, blank=True)

    class Meta:
        ordering = ["at", "id"]
        indexes = [models.Index(fields=["ticket", "at"], name="audit_ticket_idx")]

    def __str__(self) -> str:
        who = self.actor or "the desk"
        return f"{self.get_action_display()} by {who} on {self.ticket_id} at {local_words(self.at)}"


class SweepRun(models.Model):
    """When a sweep last ran: /readyz reports a schedule that stopped, which nothing else shows."""

    name = models.CharField(max_length=40, primary_key=True)
    ran_at = models.DateTimeField()

    def __str__(self) -> str:
        return f"{self.name} at {local_words(self.ran_at)}"
