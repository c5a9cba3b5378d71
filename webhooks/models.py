"""Webhooks for helpdesks: endpoints, events (written by a database trigger with each ticket
status change) and their deliveries (rows of the outbox) with a log of every attempt."""

from __future__ import annotations

import secrets
from typing import ClassVar

from django.db import models

from core.clock import local_words
from refunds.models import Email, Ticket
from refunds.models.outbox import OfKind
from webhooks.addresses import validate_webhook_url


def new_secret() -> str:
    return "whsec_" + secrets.token_urlsafe(32)


class Endpoint(models.Model):
    url = models.URLField(
        max_length=500,
        validators=[validate_webhook_url],
        help_text="Where events are POSTed: a public https address (no user name or password).",
    )
    description = models.CharField(max_length=200, blank=True)
    secret = models.CharField(
        max_length=100,
        default=new_secret,
        editable=False,
        help_text="Signs every delivery (HMAC-SHA256); give it to the receiver.",
    )
    statuses = models.JSONField(
        default=list,
        blank=True,
        help_text='Only these statuses, e.g. ["refunded", "declined"]; empty for every change.',
    )
    active = models.BooleanField(default=True)
    created_at = models.DateTimeField(auto_now_add=True)

    def __str__(self) -> str:
        return self.description or self.url

    def wants(self, status: str) -> bool:
        return not self.statuses or status in self.statuses


class Event(models.Model):
    """A ticket's status changed (opened: from_status empty), inserted by migration 0002's
    trigger whichever code path made it; or its refund's state did (0004's: both "refunded")."""

    ticket = models.ForeignKey(Ticket, on_delete=models.CASCADE, related_name="+")
    from_status = models.CharField(max_length=20, blank=True)
    to_status = models.CharField(max_length=20)
    amount_cents = models.PositiveIntegerField(null=True, blank=True)
    required_role = models.CharField(max_length=10, blank=True)
    created_at = models.DateTimeField()
    fanned_out = models.BooleanField(default=False)

    class Meta:
        indexes = [models.Index(fields=["fanned_out", "id"], name="webhook_event_fanout_idx")]

    def __str__(self) -> str:
        change = f"{self.from_status or '-'} -> {self.to_status}"
        return f"{self.event_id}: ticket {self.ticket_id} {change}"

    @property
    def event_id(self) -> str:
        """Stable across every attempt and every endpoint: receivers de-duplicate by it."""
        return f"evt_{self.pk}"


class Delivery(Email):
    """One event for one endpoint: a row of the one outbox (kind "webhook")."""

    class Deliveries(OfKind):
        kind = Email.Kind.WEBHOOK

    objects: ClassVar[Deliveries] = Deliveries()
    # Every webhook row has both (webhooks/delivery.py fan_out; the migration that carried them).
    event: Event
    endpoint: Endpoint

    class Meta:
        proxy = True
        verbose_name_plural = "deliveries"
        ordering = ["-id"]

    def __str__(self) -> str:
        return f"evt_{self.event_id} to {self.endpoint}"


class Attempt(models.Model):
    """The delivery log: one row per POST, whatever came of it."""

    delivery = models.ForeignKey(Delivery, on_delete=models.CASCADE, related_name="log")
    at = models.DateTimeField(auto_now_add=True)
    status_code = models.PositiveSmallIntegerField(null=True, blank=True)
    error = models.TextField(blank=True)
    response_body = models.TextField(blank=True)
    duration_ms = models.PositiveIntegerField(default=0)

    class Meta:
        ordering = ["at", "id"]

    def __str__(self) -> str:
        return f"{local_words(self.at)} {self.status_code or self.error[:40]}"
