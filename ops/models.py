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
