"""Keeping only the last checkpoint of finished threads (`manage.py prune`, and the retention
job): the app's own rows are kept, and the history page tells a pruned thread's story from them."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from datetime import timedelta

from django.utils import timezone

from ops.models import PrunedThread
from refunds.models import Fork, Ticket
from refunds.persistence import storage


@dataclass
class Pruned:
    finished: int = 0  # finished threads old enough
    threads: int = 0  # of those, pruned (or, dry, to be)
    removed: int = 0  # checkpoints
    bytes_before: int = 0
    bytes_after: int = 0


def prune_finished(
    older_than_days: float,
    *,
    dry_run: bool = False,
    progress: Callable[[int, int], None] | None = None,
) -> Pruned:
    cutoff = timezone.now() - timedelta(days=older_than_days)
    tickets = list(
        Ticket.objects.filter(status__in=Ticket.FINAL, updated_at__lt=cutoff)
        .order_by("pk")
        .values_list("pk", "thread_id")
    )
    done = Pruned(finished=len(tickets))
    for n, (ticket_id, thread_id) in enumerate(tickets, start=1):
        rows = storage.checkpoint_rows(thread_id)
        if len(rows) > 1 and (dry_run or _still_finished(ticket_id)):
            size = storage.thread_bytes(thread_id, rows)
            if dry_run:
                gone, after = len(rows) - 1, storage.thread_bytes(thread_id, rows[-1:])
            else:
                gone = storage.keep_latest(thread_id)
                after = storage.thread_bytes(thread_id)
                pruned, _ = PrunedThread.objects.get_or_create(
                    ticket_id=ticket_id, defaults={"bytes_before": size}
                )
                pruned.checkpoints_removed += gone
                pruned.bytes_after = after
                pruned.save()
            done.threads, done.removed = done.threads + 1, done.removed + gone
            done.bytes_before, done.bytes_after = done.bytes_before + size, done.bytes_after + after
        if progress:
            progress(n, len(tickets))
    return done


def _still_finished(ticket_id: int) -> bool:
    # A fork starts from a checkpoint: a ticket with one recorded, or not final, keeps them.
    return (
        Ticket.objects.filter(pk=ticket_id, status__in=Ticket.FINAL).exists()
        and not Fork.objects.unapplied().filter(ticket_id=ticket_id).exists()
    )
