from __future__ import annotations

from django.db import models

from core.clock import local_words


class PrunedThread(models.Model):
    """A finished thread whose older checkpoints `manage.py prune` removed."""

    ticket = models.OneToOneField("refunds.Ticket", on_delete=models.CASCADE, related_name="pruned")
    pruned_at = models.DateTimeField(auto_now=True)
    checkpoints_removed = models.PositiveIntegerField(default=0)
    bytes_before = models.BigIntegerField(default=0)
    bytes_after = models.BigIntegerField(default=0)

    def __str__(self) -> str:
        return f"{self.ticket} pruned at {local_words(self.pruned_at)}"


class Erasure(models.Model):
    """A request to forget a customer (or, from the retention job, what ended long ago), run by
    the erasure workflow (ops/erasure.py) on thread `thread_id`. The email stays only until the
    run ends; the pseudonym that replaces it is random, not derived from it."""

    class Kind(models.TextChoices):
        CUSTOMER = "customer", "A customer's request"
        RETENTION = "retention", "Kept past the retention period"

    class Status(models.TextChoices):
        RUNNING = "running", "Running"
        WAITING = "waiting", "Waiting for open tickets to end"
        DONE = "done", "Done"

    thread_id = models.CharField(max_length=64, unique=True)
    kind = models.CharField(max_length=10, choices=Kind)
    email = models.EmailField(blank=True)  # cleared when done
    orders = models.JSONField(default=list, blank=True)  # the order numbers named with it
    ended_before = models.DateTimeField(null=True, blank=True)  # retention: ended before this
    pseudonym = models.CharField(max_length=32)
    requested_by = models.CharField(max_length=200)  # who asked, in words: "admin ada", "shop"
    status = models.CharField(max_length=10, choices=Status, default=Status.RUNNING)
    waiting_for = models.JSONField(default=list, blank=True)  # ids of the open tickets
    report = models.JSONField(default=dict, blank=True)  # per store: what was erased
    requested_at = models.DateTimeField(auto_now_add=True)
    # One writer per erasure, fenced, as a message's intake is (refunds/lease.py grant_row).
    lease_owner = models.CharField(max_length=100, blank=True)
    lease_expires_at = models.DateTimeField(null=True, blank=True)
    lease_epoch = models.BigIntegerField(default=0)
    attempts = models.PositiveIntegerField(default=0)
    woken_at = models.DateTimeField(null=True, blank=True)
    last_error = models.TextField(blank=True)
    finished_at = models.DateTimeField(null=True, blank=True)
    updated_at = models.DateTimeField(auto_now=True)

    class Meta:
        ordering = ["-id"]

    def __str__(self) -> str:
        return f"Erasure {self.pk} ({self.get_status_display()})"
