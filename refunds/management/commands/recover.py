from django.core.management.base import BaseCommand, CommandError

from refunds import services


class Command(BaseCommand):
    help = "Re-enqueue every unfinished thread that no worker holds (what the periodic sweep does)."

    def handle(self, *args, **options):
        try:
            ids = services.tickets_recover()
        except services.BrokerUnavailable as exc:
            # Exit non-zero: saying "re-enqueued" when the broker refused would be a lie.
            raise CommandError(f"Re-enqueued nothing for sure: {exc}.") from None
        self.stdout.write(
            f"Re-enqueued {len(ids)} ticket(s){': ' if ids else '.'}" + ", ".join(map(str, ids))
        )
