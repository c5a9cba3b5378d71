from django.core.management.base import BaseCommand, CommandError

from refunds import runner
from refunds.flow.state import FLOW_VERSION
from refunds.models import Ticket


class Command(BaseCommand):
    help = (
        "Carry every unfinished thread of an older flow version to the current one, under its "
        "lease, as a worker would run it; exits 1 while any is left (held by a worker, or "
        "failed: retry it, then run this again). Safe to run twice and while workers run."
    )

    def handle(self, *args, **options):
        old = Ticket.objects.open().filter(flow_version__lt=FLOW_VERSION)
        ids = list(old.values_list("pk", flat=True))
        for pk in ids:
            runner.advance(pk, carry=True)
        left = list(old.values_list("pk", "status"))
        carried = len(set(ids) - {pk for pk, _ in left})
        self.stdout.write(f"Carried {carried} thread(s) to flow version {FLOW_VERSION}.")
        if left:
            raise CommandError(
                f"{len(left)} left on an older version: "
                + ", ".join(f"ticket {pk} ({status})" for pk, status in left)
            )
        self.stdout.write("None left on an older version.")
