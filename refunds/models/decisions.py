"""What reviewers and the desk answer on a ticket: decisions (and the value a resume carries),
customer questions, forks, canned reasons in each language."""

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
    """A reviewer's answer, stored before it is applied: a crash between the two is repaired by
    the sweep, and the UNIQUE interrupt id means one answer per question. A customer's reply
    to a reviewer's question (answer "reply") is recorded the same way, with no reviewer."""

    Answer = DecisionAnswer

    ticket = models.ForeignKey("refunds.Ticket", on_delete=models.CASCADE, related_name="decisions")
    interrupt_id = models.CharField(max_length=64, unique=True)
    reviewer = models.ForeignKey(
        settings.AUTH_USER_MODEL, null=True, blank=True, on_delete=models.PROTECT
    )
    answer = models.CharField(max_length=10, choices=Answer)
    reason = models.TextField(blank=True)  # for the customer: their email quotes it
    note = models.TextField(blank=True)  # internal: stays on the desk, never in the thread
    # approve or reject: the answer per open order number, in its one shape (approve with the
    # parts it refunds, reject with a reason: refunds/flow/answers.py); `answer` says whether
    # any was approved. None for an ask and the customer's reply.
    orders = models.JSONField(null=True, blank=True)
    # A rejection because the intake misread the message (back to Needs sorting): the customer
    # is told nothing now; the message's next ticket answers them.
    sent_back = models.BooleanField(default=False)
    decided_at = models.DateTimeField(auto_now_add=True)
    # The end of its undo grace (REFUNDS_UNDO_SECONDS): no worker applies it before, and Undo
    # withdraws it (deletes the row) only before. The runner sets it to None as it takes the
    # decision (the compare-and-set that Undo's also races: one wins). None: due now.
    apply_after = models.DateTimeField(null=True, blank=True)
    applied_at = models.DateTimeField(null=True, blank=True)
    refused_reason = models.TextField(blank=True)

    objects = UnappliedQuerySet.as_manager()

    class Meta:
        ordering = ["decided_at"]
        indexes = [
            # The queue's lines for what its reviewer decided in the last seconds, read on every
            # poll: without it, every decision the reviewer ever made.
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
    """What a decision sends into the thread with `Command(resume=...)`. The internal note is
    left out on purpose: what enters the thread can reach the customer's email, the note must
    not."""
    value: dict[str, Any] = {"answer": answer, "reason": reason, "reviewer": reviewer}
    if orders:
        value["orders"] = orders  # the answer per open order
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
    """A reply for the customer that admins keep (Django admin): reviewers pick one when they
    reject, agents one when they set a message aside as not a refund request (`use`); either may
    add or write words of their own."""

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
        """Its words in the customer's language (ISO 639-1; "" for a customer the desk has not
        read, who is written to in English): `text` is English, the others are its
        CannedReasonTexts. None when it has none in that language: it goes in English, and
        the desk tells the reviewer so before they pick it."""
        code = (language or "en").lower().split("-")[0]
        if code == "en":
            return self.text
        return next((t.text for t in self.texts.all() if t.language == code), None)


class CannedReasonText(models.Model):
    """A canned reply's words in one more language the desk writes to customers in
    (settings.LANGUAGES); its `text` on CannedReason is the English."""

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
    """A reviewer's question to the customer (a Decision answered "ask"), and the token that
    the reply address carries for it (REFUNDS_REPLY_ADDRESS): unguessable, one per question.
    The thread waits on the customer until a reply from their address, matched by the token or
    by the question email's Message-ID, is recorded as the wait's Decision (`reply`)."""

    ticket = models.ForeignKey("refunds.Ticket", on_delete=models.CASCADE, related_name="questions")
    # Undoing the ask within its grace deletes the decision, and the question with it.
    decision = models.OneToOneField(Decision, on_delete=models.CASCADE, related_name="question")
    token = models.CharField(max_length=64, unique=True)
    text = models.TextField()
    asked_by = models.ForeignKey(
        settings.AUTH_USER_MODEL, on_delete=models.PROTECT, related_name="+"
    )
    asked_at = models.DateTimeField(auto_now_add=True)
    # The outbox key of the question's email, and its Message-ID (a reply's In-Reply-To).
    email_key = models.CharField(max_length=150, unique=True)
    message_id = models.CharField(max_length=200, db_index=True)
    # The reply that resumed the thread: its Decision, set once (a compare-and-set on NULL).
    reply = models.OneToOneField(
        Decision, null=True, blank=True, on_delete=models.SET_NULL, related_name="+"
    )
    replied_at = models.DateTimeField(null=True, blank=True)
    # A reply that came before the thread waited on the question ({"text", "seen"}): the mail
    # server took the question before the run that sent it reached its wait. Kept once (a
    # compare-and-set on NULL); the recovery sweep applies it as the reply once the thread waits.
    early_reply = models.JSONField(null=True, blank=True)
    # The reminder the wait's timer sent (REFUNDS_ASK_REMIND_DAYS), once.
    reminded_at = models.DateTimeField(null=True, blank=True)
    # The reply that reopened the ticket closed for want of one (REFUNDS_ASK_DEFAULT_OUTCOME
    # "close"): set once, a compare-and-set on NULL, so a reply delivered twice reopens once.
    reopened_at = models.DateTimeField(null=True, blank=True)

    class Meta:
        ordering = ["asked_at", "id"]

    def __str__(self) -> str:
        return f"Question {self.pk} on {self.ticket}"


class Fork(models.Model):
    """An admin's correction: the thread is forked from its checkpoint before triage with a
    corrected amount. The row is the audit entry; a worker applies it under the lease."""

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
