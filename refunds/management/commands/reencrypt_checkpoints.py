from django.core.management.base import BaseCommand, CommandError

from refunds.persistence.encryption import UnknownKey
from refunds.persistence.reencrypt import reencrypt_all


class Command(BaseCommand):
    help = (
        "Rewrite checkpoints, pending writes, checkpoint blobs and store values under the first "
        "key of REFUNDS_CHECKPOINT_KEYS (older keys' rows, and rows written before keys were "
        "set), in place and in batches. Safe to run twice and while workers run."
    )

    def add_arguments(self, parser):
        parser.add_argument("--batch", type=int, default=500, help="rows per transaction")

    def handle(self, *args, **options):
        try:
            counts = reencrypt_all(batch=options["batch"], say=self.stdout.write)
        except (RuntimeError, UnknownKey) as exc:
            raise CommandError(str(exc)) from None
        self.stdout.write(f"Rewrote {sum(counts.values())} row(s) under the newest key.")
