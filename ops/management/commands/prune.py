"""Remove all but the last checkpoint of finished threads older than a given age (ops/pruning.py;
the retention job runs the same every day, REFUNDS_RETAIN_CHECKPOINTS_DAYS)."""

from __future__ import annotations

import sys

from django.core.management.base import BaseCommand, CommandParser

from ops.pruning import prune_finished


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

        def progress(n: int, total: int) -> None:
            self.stderr.write(f"\r{bar(n, total)}", ending="" if n < total else "\n")

        done = prune_finished(
            older_than, dry_run=dry_run, progress=None if no_progress else progress
        )
        verb = "Would prune" if dry_run else "Pruned"
        self.stdout.write(
            f"{verb} {done.threads} of {done.finished} finished thread(s) older than "
            f"{older_than:g} day(s): {done.removed} checkpoint(s), {done.bytes_before:,} -> "
            f"{done.bytes_after:,} bytes."
        )
