"""What reviewers and the desk answer on a ticket: decisions, questions, forks, canned reasons."""

from __future__ import annotations

import math
from typing import Any

from django.conf import settings
from django.db import models
from django.db.models import Q
from django.db.models.functions import Now
from django.utils import timezone

from refunds.flow.words import dollars
from refunds.statuses import DecisionAnswer


class UnappliedQuerySet(models.QuerySet):
    def unapplied(self) -> UnappliedQuerySet:
        """Recorded and neither applied nor refused: the thread still owes it a run."""
        return self.filter(applied_at=None, refused_reason="")

    def due(self) -> UnappliedQuerySet:
        """Past its undo grace (a fork has none): a worker may apply it now."""
        return self.filter(Q(apply_after__isnull=True) | Q(apply_after__lte=Now()))


class Decision(models.Model):
    """Stored before it is applied (the sweep repairs a crash between); one per interrupt id."""

    Answer = DecisionAnswer

    ticket = models.ForeignKey("refunds.Ticket", on_delete=models.CASCADE, related_name="decisions")
    interrupt_id = models.CharField(max_length=64, unique=True)
    reviewer = models.ForeignKey(
        settings.AUTH_USER_MODEL, null=True, blank=True, on_delete=models.PROTECT
    )
    answer = models.CharField(max_length=10, choices=Answer)
    reason = models.TextField(blank=True)  # for the customer: their email quotes it
    note = models.TextField(blank=True)  # internal: stays on the desk, never in the thread
    # The answer per open order (refunds/flow/answers.py); None for an ask and a reply.
    orders = models.JSONField(null=True, blank=True)
    # A misread message sent back to Needs sorting: its next ticket answers the customer.
    sent_back = models.BooleanField(default=False)
    decided_at = models.DateTimeField(auto_now_add=True)
    # The end of its undo grace: no worker applies it before, Undo deletes it only before. The
    # runner sets None as it takes it, a compare-and-set that Undo's races: one wins.
    apply_after = models.DateTimeField(null=True, blank=True)
    applied_at = models.DateTimeField(null=True, blank=True)
    refused_reason = models.TextField(blank=True)

    objects = UnappliedQuerySet.as_manager()

    class Meta:
        ordering = ["decided_at"]
        indexes = [
            # Read on every queue poll: without it, every decision the reviewer ever made.
            models.Index(fields=["reviewer", "decided_at"], name="decision_reviewer_recent_idx"),
        ]

    def __str__(self) -> str:
        return f"{self.get_answer_display()} by {self.reviewer or 'the customer'} on {self.ticket}"

    def undo_seconds_left(self) -> int:
        """Whole seconds left of its undo grace (0 once it is over, or when it had none)."""
        if self.apply_after is None:
            return 0
        left = (self.apply_after - timezone.now()).total_seconds()
        return max(math.ceil(left), 0)


def resume_value(
    answer: str,
    reason: str,
    reviewer: str,
    orders: dict | None = None,
    *,
    sent_back: bool = False,
) -> dict:
    """Never the internal note: what enters the thread can reach the customer's email."""
    value: dict[str, Any] = {"answer": answer, "reason": reason, "reviewer": reviewer}
    if orders:
        value["orders"] = orders
    if sent_back:
        value["sent_back"] = True  # a misread message sent back: nothing to tell the customer
    return value


class CannedReasonQuerySet(models.QuerySet):
    def rejecting(self) -> CannedReasonQuerySet:
        """The active replies a reviewer picks when they reject."""
        return self.filter(active=True, use=CannedReason.Use.REJECT).with_texts()

    def asking(self) -> CannedReasonQuerySet:
        """The active questions a reviewer picks when they ask the customer."""
        return self.filter(active=True, use=CannedReason.Use.ASK).with_texts()

    def setting_aside(self) -> CannedReasonQuerySet:
        """The active replies an agent picks when they set a message aside."""
        return self.filter(active=True, use=CannedReason.Use.SET_ASIDE).with_texts()

    def with_texts(self) -> CannedReasonQuerySet:
        """With their texts in other languages, which every offer of them reads."""
        return self.prefetch_related("texts")


class CannedReason(models.Model):
    """A reply for the customer that admins keep, picked by its `use`."""

    class Use(models.TextChoices):
        REJECT = "reject", "Rejecting a refund"
        SET_ASIDE = "set_aside", "Setting a message aside (not a refund request)"
        ASK = "ask", "Asking the customer (a question)"

    title = models.CharField(max_length=80, unique=True)
    text = models.TextField()
    active = models.BooleanField(default=True)
    position = models.PositiveSmallIntegerField(default=0)
    use = models.CharField(max_length=10, choices=Use, default=Use.REJECT)

    objects = CannedReasonQuerySet.as_manager()

    class Meta:
        ordering = ["position", "title"]

    def __str__(self) -> str:
        return self.title

    def text_in(self, language: str) -> str | None:
        """Its words in the customer's language ("": English); None: none, it goes in English."""
        code = (language or "en").lower().split("-")[0]
        if code == "en":
            return self.text
        return next((t.text for t in self.texts.all() if t.language == code), None)


class CannedReasonText(models.Model):
    """A canned reply's words in another of settings.LANGUAGES than English."""

    canned = models.ForeignKey(CannedReason, on_delete=models.CASCADE, related_name="texts")
    language = models.CharField(
        max_length=8, choices=[(c, n) for c, n in settings.LANGUAGES if c != "en"]
    )
    text = models.TextField()

    class Meta:
        ordering = ["language"]
        constraints = [
            models.UniqueConstraint(fields=["canned", "language"], name="canned_text_per_language")
        ]

    def __str__(self) -> str:
        return f"{self.canned} ({self.language})"


class CustomerQuestion(models.Model):
    """A question to the customer, with an unguessable token for its reply address; a reply
    matched by it or by Message-ID resumes the wait."""

    ticket = models.ForeignKey("refunds.Ticket", on_delete=models.CASCADE, related_name="questions")
    # Undoing the ask within its grace deletes the decision, and the question with it.
    decision = models.OneToOneField(Decision, on_delete=models.CASCADE, related_name="question")
    token = models.CharField(max_length=64, unique=True)
    text = models.TextField()
    asked_by = models.ForeignKey(
        settings.AUTH_USER_MODEL, on_delete=models.PROTECT, related_name="+"
    )
    asked_at = models.DateTimeField(auto_now_add=True)
    email_key = models.CharField(max_length=150, unique=True)
    message_id = models.CharField(max_length=200, db_index=True)
    # The reply that resumed the thread: its Decision, set once (a compare-and-set on NULL).
    reply = models.OneToOneField(
        Decision, null=True, blank=True, on_delete=models.SET_NULL, related_name="+"
    )
    replied_at = models.DateTimeField(null=True, blank=True)
    # A reply before the thread waited: kept once (CAS on NULL), applied by the sweep later.
    early_reply = models.JSONField(null=True, blank=True)
    reminded_at = models.DateTimeField(null=True, blank=True)  # REFUNDS_ASK_REMIND_DAYS, once
    # A compare-and-set on NULL: a reply delivered twice reopens a closed ticket once.
    reopened_at = models.DateTimeField(null=True, blank=True)

    class Meta:
        ordering = ["asked_at", "id"]

    def __str__(self) -> str:
        return f"Question {self.pk} on {self.ticket}"


class ReturnRequest(models.Model):
    """An approval on return: the goods asked back under a reference, and what came of it. The
    warehouse's word on it is the wait's Decision, recorded once (a compare-and-set on NULL)."""

    ticket = models.ForeignKey("refunds.Ticket", on_delete=models.CASCADE, related_name="returns")
    # Undoing the approval within its grace deletes the decision, and the return with it.
    decision = models.OneToOneField(Decision, on_delete=models.CASCADE, related_name="goods_return")
    reference = models.CharField(max_length=32, unique=True)  # flow.nodes.returns.return_reference
    orders = models.JSONField()  # per order number, the line parts asked back
    asked_at = models.DateTimeField(auto_now_add=True)
    reminded_at = models.DateTimeField(null=True, blank=True)  # REFUNDS_RETURN_REMIND_DAYS, once
    # What came of it ({"answer", "orders", "reason", "by"}), set once with `arrived_at`.
    arrived_at = models.DateTimeField(null=True, blank=True)
    arrived = models.JSONField(null=True, blank=True)
    outcome = models.OneToOneField(
        Decision, null=True, blank=True, on_delete=models.SET_NULL, related_name="+"
    )
    # An arrival before the thread waited: kept once (CAS on NULL), applied by the sweep later.
    early = models.JSONField(null=True, blank=True)

    class Meta:
        ordering = ["asked_at", "id"]

    def __str__(self) -> str:
        return f"Return {self.reference} on {self.ticket}"


class CreditOffer(models.Model):
    """An approval that offers store credit: the customer's choice (a signed link, or a reply to
    its token's address) is the wait's Decision, recorded once (a compare-and-set on NULL)."""

    ticket = models.ForeignKey("refunds.Ticket", on_delete=models.CASCADE, related_name="offers")
    decision = models.OneToOneField(Decision, on_delete=models.CASCADE, related_name="offer")
    token = models.CharField(max_length=64, unique=True)  # in the reply address
    email_key = models.CharField(max_length=150, unique=True)
    offered_at = models.DateTimeField(auto_now_add=True)
    chosen_at = models.DateTimeField(null=True, blank=True)
    choice = models.OneToOneField(
        Decision, null=True, blank=True, on_delete=models.SET_NULL, related_name="+"
    )

    def __str__(self) -> str:
        return f"Offer of store credit on {self.ticket}"


class Fork(models.Model):
    """An admin's corrected amount, forked before triage; a worker applies it under the lease."""

    ticket = models.ForeignKey("refunds.Ticket", on_delete=models.CASCADE, related_name="forks")
    by = models.ForeignKey(settings.AUTH_USER_MODEL, on_delete=models.PROTECT)
    amount_cents = models.PositiveIntegerField()
    reason = models.TextField()
    created_at = models.DateTimeField(auto_now_add=True)
    from_checkpoint_id = models.CharField(max_length=64, blank=True)
    previous_amount_cents = models.PositiveIntegerField(null=True, blank=True)
    applied_at = models.DateTimeField(null=True, blank=True)
    refused_reason = models.TextField(blank=True)

    objects = UnappliedQuerySet.as_manager()

    class Meta:
        ordering = ["created_at"]

    def __str__(self) -> str:
        return f"Fork of {self.ticket} by {self.by} to {dollars(self.amount_cents)}"
