"""A customer's message, as it came in: one row per message, whatever channel brought it."""

from __future__ import annotations

from django.conf import settings
from django.db import models
from django.db.models import Q
from django.db.models.functions import Now

from core.clock import local_words
from refunds.models import Ticket

ACK_SUFFIX = ":ack"
# The reply to a message set aside: "intake-reply:<message>:<event>", one per setting aside.
REPLY_PREFIX = "intake-reply:"


class MessageQuerySet(models.QuerySet):
    def needing_worker(self, settled_before=None) -> MessageQuerySet:
        """Unfinished messages no worker holds (by the database clock), untouched since a time."""
        young = {} if settled_before is None else {"updated_at__lt": settled_before}
        return self.filter(finished_at__isnull=True, **young).filter(
            Q(lease_expires_at__isnull=True) | Q(lease_expires_at__lt=Now())
        )

    def given_up(self) -> MessageQuerySet:
        """Messages the intake stopped on after its attempts: finished with an error kept."""
        return self.filter(finished_at__isnull=False).exclude(last_error="")


class Message(models.Model):
    class Channel(models.TextChoices):
        EMAIL = "email", "Email"  # the mail provider's inbound webhook
        API = "api", "API"  # POST /api/messages/
        DESK = "desk", "Desk"  # pasted into the desk's "Open a ticket" form

    class Status(models.TextChoices):
        RECEIVED = "received", "Received"  # the intake has not finished with it yet
        OPENED = "opened", "Opened a ticket"
        ADDED = "added", "Added to an open ticket"
        NEEDS_SORTING = "needs_sorting", "Needs sorting"
        NOT_REFUND = "not_refund", "Not a refund request"
        # Asked where a refund is: answered with its ticket's status (`ticket`), nothing opened.
        ANSWERED = "answered", "Answered with its ticket's status"

    # Message-ID (email) or Idempotency-Key (API), by channel: one row however often delivered.
    key = models.CharField(max_length=300, unique=True)
    channel = models.CharField(max_length=10, choices=Channel)
    sender = models.EmailField(max_length=254)
    sender_name = models.CharField(max_length=200, blank=True)
    subject = models.CharField(max_length=998, blank=True)  # RFC 5322's line limit
    body = models.TextField(blank=True)
    # How long an email's text cut at INTAKE_MAX_CHARS was (all of it is in `raw`); None: not cut.
    uncut_chars = models.PositiveIntegerField(null=True, blank=True)
    unread = models.TextField(blank=True, default="", db_default="")
    received_at = models.DateTimeField()
    raw = models.TextField(blank=True)  # the payload as it arrived (MIME, or the API's JSON)
    # Our emails about it reply to it, so the customer sees one conversation.
    message_id = models.CharField(max_length=998, blank=True, default="", db_default="")
    # Four-eyes: the ticket it opens counts as theirs, so they never decide it. None for email.
    brought_by = models.ForeignKey(
        settings.AUTH_USER_MODEL, null=True, blank=True, on_delete=models.SET_NULL, related_name="+"
    )
    # [{"name", "type" (as declared), "size", "sha256", "refused": why, "" when kept}]
    attachments = models.JSONField(default=list, blank=True)
    thread_id = models.CharField(max_length=64, unique=True)

    status = models.CharField(max_length=16, choices=Status, default=Status.RECEIVED, db_index=True)
    reading = models.JSONField(null=True, blank=True)
    sorting_reason = models.TextField(blank=True)
    # None while only the intake placed it.
    handled_by = models.ForeignKey(
        settings.AUTH_USER_MODEL, null=True, blank=True, on_delete=models.SET_NULL, related_name="+"
    )
    handled_at = models.DateTimeField(null=True, blank=True)
    # A reply to a reviewer's question, whether or not it resumed the wait: not a new request.
    answers_question = models.ForeignKey(
        "refunds.CustomerQuestion",
        null=True,
        blank=True,
        on_delete=models.SET_NULL,
        related_name="messages",
    )
    # A reply (answers_question) that resumed the ticket's wait: the one the review quotes.
    resumed_wait = models.BooleanField(default=False, db_default=False)
    ticket = models.ForeignKey(
        Ticket, null=True, blank=True, on_delete=models.SET_NULL, related_name="messages"
    )
    # One writer per message, fenced: every effect is conditional on its epoch holding this row.
    lease_owner = models.CharField(max_length=100, blank=True)
    lease_expires_at = models.DateTimeField(null=True, blank=True)
    lease_epoch = models.BigIntegerField(default=0)
    attempts = models.PositiveIntegerField(default=0)
    # As Ticket.woken_at: the sweep's wake-up not yet taken by a worker (a grant clears it).
    woken_at = models.DateTimeField(null=True, blank=True)
    last_error = models.TextField(blank=True)
    finished_at = models.DateTimeField(null=True, blank=True)
    erased_at = models.DateTimeField(null=True, blank=True)  # its sender's words forgotten

    created_at = models.DateTimeField(auto_now_add=True)
    updated_at = models.DateTimeField(auto_now=True)

    objects = MessageQuerySet.as_manager()

    class Meta:
        ordering = ["-id"]
        indexes = [
            models.Index(fields=["status", "-id"], name="message_status_idx"),
            models.Index(fields=["finished_at", "lease_expires_at"], name="message_sweep_idx"),
        ]

    def __str__(self) -> str:
        return f"Message {self.pk} from {self.sender}"

    @property
    def cut_note(self) -> str:
        """What pages say when its text was cut, or the email was read in part; "" when neither."""
        if self.uncut_chars is None:
            return f"This email was read in part. {self.unread}" if self.unread else ""
        # Its first MIME parts only, when the rest were not read: the raw email is kept that far.
        kept = (
            "the email is kept as far as it was read" if self.unread else "the whole email is kept"
        )
        return (
            f"This message was cut to the first {len(self.body):,} characters for reading "
            f"(it has {self.uncut_chars:,}); {kept} as it came. {self.unread}"
        ).strip()

    @property
    def ack_key(self) -> str:
        """The outbox key of its acknowledgment."""
        return f"{self.thread_id}{ACK_SUFFIX}"


class MessageTicket(models.Model):
    """Where a message went: one row per ticket it opened or was added to."""

    message = models.ForeignKey(Message, on_delete=models.CASCADE, related_name="placements")
    ticket = models.ForeignKey(Ticket, on_delete=models.CASCADE, related_name="message_placements")
    orders = models.JSONField(default=list)  # the message's order numbers this ticket covers
    added = models.BooleanField(default=False)  # added to a ticket already open, not opened by it

    class Meta:
        ordering = ["id"]
        constraints = [
            models.UniqueConstraint(fields=["message", "ticket"], name="message_ticket_once")
        ]

    def __str__(self) -> str:
        return f"Message {self.message_id} {'added to' if self.added else 'opened'} {self.ticket}"


class MessageEvent(models.Model):
    """An action a person took on a message; not an AuditEvent, as a message may have no ticket."""

    class Action(models.TextChoices):
        SORT = "sort", "Sorted into a ticket"
        # answer: {"reply": "canned" | "own" | "none", "canned", "why", "email"}
        NOT_REFUND = "not_refund", "Set aside as not a refund request"
        UNDO_NOT_REFUND = "undo_not_refund", "Set aside undone: back to Needs sorting"
        SEND_BACK = "send_back", "Sent back to Needs sorting"
        RETRY = "retry", "Handed back to the intake after it gave up"
        RESEND = "resend", "Its acknowledgment resent"

    message = models.ForeignKey(Message, on_delete=models.CASCADE, related_name="events")
    actor = models.ForeignKey(
        settings.AUTH_USER_MODEL, null=True, blank=True, on_delete=models.PROTECT, related_name="+"
    )
    action = models.CharField(max_length=20, choices=Action)
    at = models.DateTimeField(auto_now_add=True, db_index=True)
    answer = models.JSONField(default=dict, blank=True)  # what they chose: orders, reason, ...
    note = models.TextField(blank=True)

    class Meta:
        ordering = ["at", "id"]

    def __str__(self) -> str:
        who = self.actor or "the desk"
        return f"{self.get_action_display()} by {who} on message {self.message_id}"


class SignatureToken(models.Model):
    """A signed post's token, taken once; kept while young enough to pass the age check."""

    token = models.CharField(max_length=200, unique=True)
    signed_at = models.DateTimeField(db_index=True)

    def __str__(self) -> str:
        return f"Signature token {self.token[:12]}… of {local_words(self.signed_at)}"


class Attachment(models.Model):
    """A kept file; its bytes are written under `name` before this row (a retry writes again)."""

    message = models.ForeignKey(Message, on_delete=models.CASCADE, related_name="files")
    name = models.CharField(max_length=255, unique=True)  # in the "attachments" storage
    filename = models.CharField(max_length=255, blank=True)  # as the customer's mail named it
    content_type = models.CharField(max_length=100)  # read from its bytes, not its name
    size = models.PositiveBigIntegerField()
    sha256 = models.CharField(max_length=64)
    # Shown as a picture (attachments.previewable); files kept before it was measured: links.
    preview = models.BooleanField(default=False)
    created_at = models.DateTimeField(auto_now_add=True)

    class Meta:
        ordering = ["id"]
        constraints = [
            models.UniqueConstraint(fields=["message", "sha256"], name="attachment_once")
        ]

    def __str__(self) -> str:
        return f"{self.filename or self.name} on message {self.message_id}"

    @property
    def is_image(self) -> bool:
        """A kind a browser shows as a picture (HEIC is not, by most)."""
        return self.content_type.startswith("image/") and self.content_type != "image/heic"
