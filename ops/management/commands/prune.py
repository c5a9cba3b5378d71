"""Remove all but the last checkpoint of finished threads older than a given age; the app's own
rows are kept, and the history page tells a pruned thread's story from them."""

from __future__ import annotations

import sys
from datetime import timedelta

from django.core.management.base import BaseCommand, CommandParser
from django.utils import timezone

from ops.models import PrunedThread
from refunds.models import Fork, Ticket
from refunds.persistence import storage


def bar(done: int, total: int, width: int = 30) -> str:
    filled = width * done // total if total else width
    return f"[{'#' * filled}{'.' * (width - filled)}] {done}/{total}"


class Command(BaseCommand):
    help = "Keep only the last checkpoint of finished threads older than --older-than days."

    def add_arguments(self, parser: CommandParser) -> None:
        parser.add_argument("--older-than", type=float, default=30.0, metavar="DAYS")
        parser.add_argument(
            "--dry-run", action="store_true", help="say what would go; change nothing"
        )
        parser.add_argument("--no-progress", action="store_true")

    def handle(self, *args, older_than: float, dry_run: bool, no_progress: bool, **options):
        if older_than < 0:
            self.stderr.write("--older-than must be 0 or more days")
            sys.exit(2)
        cutoff = timezone.now() - timedelta(days=older_than)
        tickets = list(
            Ticket.objects.filter(status__in=Ticket.FINAL, updated_at__lt=cutoff)
            .order_by("pk")
            .values_list("pk", "thread_id")
        )
        threads = removed = before_total = after_total = 0
        show = not no_progress and len(tickets) > 0
        for n, (ticket_id, thread_id) in enumerate(tickets, start=1):
            rows = storage.checkpoint_rows(thread_id)
            if len(rows) > 1 and (dry_run or self._still_finished(ticket_id)):
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
                threads, removed = threads + 1, removed + gone
                before_total, after_total = before_total + size, after_total + after
            if show:
                self.stderr.write(f"\r{bar(n, len(tickets))}", ending="")
        if show:
            self.stderr.write("")
        verb = "Would prune" if dry_run else "Pruned"
        self.stdout.write(
            f"{verb} {threads} of {len(tickets)} finished thread(s) older than {older_than:g} "
            f"day(s): {removed} checkpoint(s), {before_total:,} -> {after_total:,} bytes."
        )

    @staticmethod
    def _still_finished(ticket_id: int) -> bool:
        # A fork starts from a checkpoint: a ticket with one recorded, or not final, keeps them.
        return (
            Ticket.objects.filter(pk=ticket_id, status__in=Ticket.FINAL).exists()
            and not Fork.objects.unapplied().filter(ticket_id=ticket_id).exists()
        )
