from django.core.management.base import BaseCommand

from refunds import services


class Command(BaseCommand):
    help = "Re-enqueue every unfinished thread that no worker holds (what the periodic sweep does)."

    def handle(self, *args, **options):
        ids = services.tickets_recover()
        self.stdout.write(
            f"Re-enqueued {len(ids)} ticket(s){': ' if ids else '.'}" + ", ".join(map(str, ids))
        )
